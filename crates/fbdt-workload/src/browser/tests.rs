use super::page::write_page_of;
use super::*;

fn timings(files: &PageFiles) -> PageTimings {
    PageTimings {
        load_event_end: 100.0,
        dom_content_loaded: 50.0,
        fcp: Some(40.0),
        html_bytes: files.html_bytes,
        protocol: "http/1.1".into(),
        scripts_ran: files.scripts,
        images_decoded: files.images,
        stylesheets: files.stylesheets,
        resources: files
            .objects
            .iter()
            .map(|(p, b)| RequestTiming {
                name: p.clone(),
                start_ms: 1.0,
                request_ms: 2.0,
                first_byte_ms: 3.0,
                end_ms: 4.0,
                bytes: *b,
                protocol: "http/1.1".into(),
            })
            .collect(),
    }
}

#[test]
fn a_missing_or_short_object_fails_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_page_of(dir.path(), "t", &[100, 200, 300, 400], 1).unwrap();
    verify(&timings(&files), &files, "http/1.1").unwrap();
    assert!(verify(&timings(&files), &files, "h2").is_err());
    let mut t = timings(&files);
    t.resources.pop();
    assert!(verify(&t, &files, "http/1.1")
        .unwrap_err()
        .to_string()
        .contains("never fetched"));
    let mut t = timings(&files);
    t.resources[0].bytes -= 1;
    assert!(verify(&t, &files, "http/1.1").is_err());
    let mut t = timings(&files);
    t.scripts_ran = 0;
    assert!(verify(&t, &files, "http/1.1").is_err());
}
