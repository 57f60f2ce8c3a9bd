//! The pages a real browser loads: Table I's objects (web.rs's sizes and seeds) written to
//! disk as stylesheets, deferred scripts and PNG images (the png crate) of exactly those
//! sizes, and the HTML that asks for them all.

use std::path::Path;

use anyhow::{Context, Result};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::web::{generate, PageSpec};

/// Objects smaller than this become stylesheets, not images: the smallest PNG the
/// hand-written writer made (signature 8 + IHDR 25 + IDAT 25 + padding chunk 12 + IEND 12
/// bytes), kept so that every page has the objects of the same kinds as before the png
/// crate wrote them (its smallest is no larger; a test checks).
const PNG_MIN: u64 = 82;
/// A script that counts itself when it runs; padded to its size in a comment.
pub const SCRIPT_CODE: &str = "window.fbdtRan=(window.fbdtRan||0)+1;";

/// What kind of subresource an object is, by its place in the page (one stylesheet and two
/// scripts in every eight objects, the rest images) — objects too small for a PNG or a
/// counting script are stylesheets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjectKind {
    Stylesheet,
    Script,
    Image,
}

impl ObjectKind {
    fn of(index: usize, bytes: u64) -> Self {
        let wanted = match index % 8 {
            0 => ObjectKind::Stylesheet,
            1 | 2 => ObjectKind::Script,
            _ => ObjectKind::Image,
        };
        match wanted {
            ObjectKind::Image if bytes < PNG_MIN => ObjectKind::Stylesheet,
            ObjectKind::Script if bytes < SCRIPT_CODE.len() as u64 + 4 => ObjectKind::Stylesheet,
            k => k,
        }
    }

    fn extension(self) -> &'static str {
        match self {
            ObjectKind::Stylesheet => "css",
            ObjectKind::Script => "js",
            ObjectKind::Image => "png",
        }
    }
}

/// One generated page on disk: what the browser must get.
#[derive(Debug)]
pub struct PageFiles {
    /// URL path of the HTML, from the server's root.
    pub url_path: String,
    pub html_bytes: u64,
    /// URL path of every object (from the server's root) and its size.
    pub objects: Vec<(String, u64)>,
    pub scripts: usize,
    pub images: usize,
    pub stylesheets: usize,
}

/// `n` lowercase letters from `rng` (padding that can sit in any comment or chunk).
fn letters(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    for b in &mut v {
        *b = b'a' + *b % 26;
    }
    v
}

/// A valid 1×1 grey PNG of exactly `bytes` (≥ [`PNG_MIN`]) from the png crate, the rest in
/// a private ancillary chunk (`fbDt`) decoders skip.
fn png(bytes: u64, rng: &mut ChaCha8Rng) -> Result<Vec<u8>> {
    let grey = rng.gen::<u8>();
    let encode = |pad: &[u8]| -> Result<Vec<u8>, png::EncodingError> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, 1, 1);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&[grey])?;
        writer.write_chunk(png::chunk::ChunkType(*b"fbDt"), pad)?;
        writer.finish()?;
        Ok(out)
    };
    let bare = encode(&[]).context("encoding a PNG")?.len();
    encode(&letters(rng, (bytes as usize).saturating_sub(bare))).context("encoding a PNG")
}
/// for a script.
fn text_object(kind: ObjectKind, bytes: u64, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let bytes = bytes as usize;
    let code = if kind == ObjectKind::Script { SCRIPT_CODE } else { "" };
    if bytes < code.len() + 4 {
        return vec![b' '; bytes];
    }
    let mut v = code.as_bytes().to_vec();
    v.extend_from_slice(b"/*");
    v.extend(letters(rng, bytes - code.len() - 4));
    v.extend_from_slice(b"*/");
    v
}

/// Writes `spec`'s page for `seed` under `root/<page>-<seed>/`: the objects of
/// [`generate`]'s sizes (× `scale`) and the HTML that asks for them all.
pub fn write_page(root: &Path, spec: &PageSpec, scale: f64, seed: u64) -> Result<PageFiles> {
    let sizes = generate(spec, scale, seed);
    write_page_of(root, spec.name, &sizes, seed)
}

pub fn write_page_of(root: &Path, name: &str, sizes: &[u64], seed: u64) -> Result<PageFiles> {
    let dir_name = format!("{name}-{seed}");
    let dir = root.join(&dir_name);
    std::fs::create_dir_all(dir.join("o")).with_context(|| format!("creating {}", dir.display()))?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6272_6f77_7365_7221);
    let (mut head, mut body) = (String::new(), String::new());
    let mut files = PageFiles {
        url_path: format!("/{dir_name}/index.html"),
        html_bytes: 0,
        objects: Vec::new(),
        scripts: 0,
        images: 0,
        stylesheets: 0,
    };
    for (i, &bytes) in sizes.iter().enumerate() {
        let kind = ObjectKind::of(i, bytes);
        let file = format!("o/{i}.{}", kind.extension());
        let content = match kind {
            ObjectKind::Image => png(bytes, &mut rng)?,
            k => text_object(k, bytes, &mut rng),
        };
        debug_assert_eq!(content.len() as u64, bytes);
        std::fs::write(dir.join(&file), &content)?;
        match kind {
            ObjectKind::Stylesheet => {
                files.stylesheets += 1;
                head.push_str(&format!("<link rel=\"stylesheet\" href=\"{file}\">\n"));
            }
            ObjectKind::Script => {
                files.scripts += 1;
                head.push_str(&format!("<script defer src=\"{file}\"></script>\n"));
            }
            ObjectKind::Image => {
                files.images += 1;
                body.push_str(&format!(
                    "<img src=\"{file}\" width=\"32\" height=\"32\" alt=\"{i}\">\n"
                ));
            }
        }
        files.objects.push((format!("/{dir_name}/{file}"), bytes));
    }
    // The resource timing buffer holds 250 entries by default; cnn and amazon have more.
    // An inline icon keeps the browser from asking for /favicon.ico, which is no object.
    let html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{name} (seed {seed})</title>\n\
         <link rel=\"icon\" href=\"data:,\">\n\
         <script>performance.setResourceTimingBufferSize(100000);</script>\n{head}</head>\n\
         <body><h1>{name}</h1><p>A synthetic page of {} objects (fbdt-lab, seed {seed}).</p>\n\
         {body}</body></html>\n",
        sizes.len()
    );
    files.html_bytes = html.len() as u64;
    std::fs::write(dir.join("index.html"), html)?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_objects_have_their_sizes_and_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = [1, 40, 81, 82, 83, 5000, 20, 100_000, 300];
        let files = write_page_of(dir.path(), "t", &sizes, 7).unwrap();
        assert_eq!(files.objects.len(), sizes.len());
        for ((path, bytes), want) in files.objects.iter().zip(sizes) {
            assert_eq!(*bytes, want);
            let on_disk = std::fs::read(dir.path().join(path.trim_start_matches('/'))).unwrap();
            assert_eq!(on_disk.len() as u64, want, "{path}");
            if path.ends_with(".png") {
                assert!(on_disk.starts_with(b"\x89PNG\r\n\x1a\n"));
                assert!(on_disk.ends_with(&[0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xae, 0x42, 0x60, 0x82]));
            }
        }
        assert_eq!(files.scripts + files.images + files.stylesheets, sizes.len());
        let html = std::fs::read_to_string(dir.path().join("t-7/index.html")).unwrap();
        assert_eq!(html.len() as u64, files.html_bytes);
        // Deterministic from the seed.
        let again = tempfile::tempdir().unwrap();
        write_page_of(again.path(), "t", &sizes, 7).unwrap();
        for (path, _) in &files.objects {
            let p = path.trim_start_matches('/');
            assert_eq!(
                std::fs::read(dir.path().join(p)).unwrap(),
                std::fs::read(again.path().join(p)).unwrap()
            );
        }
    }

    #[test]
    fn the_smallest_png_fits_png_min() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(png(PNG_MIN, &mut rng).unwrap().len() as u64, PNG_MIN);
    }
}
