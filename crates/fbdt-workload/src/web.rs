//! Q2, web pages: synthetic pages with Table I's object counts and size statistics
//! (paper 001), loaded over one session. The first object plays the HTML; when it arrived
//! the client asks for the rest — all at once (HTTP/2, one connection) or at most six
//! outstanding, the next asked for when one arrived (HTTP/1.1, six connections). Pages are
//! repeated with 1-s gaps, as in the paper. Page load time = HTML request to last object.

use anyhow::{anyhow, bail, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::driver::{Application, ObjectRecord, Request};
use super::metrics::{summarise, Summary};
use super::progressive::standard_normal;
use super::setup::{Setup, WorkloadArgs};

/// One page's object statistics (sizes in bytes, decimal KB/MB as the paper's Table I).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PageSpec {
    pub name: &'static str,
    pub objects: usize,
    pub total_bytes: f64,
    pub mean_bytes: f64,
    pub sd_bytes: f64,
}

/// Table I (paper 001), plus a median modern page: ≈ 70 requests and ≈ 2 MB (HTTP
/// Archive); its spread (sd = 2 × mean) is our assumption.
pub const PAGES: [PageSpec; 5] = [
    PageSpec {
        name: "msn",
        objects: 33,
        total_bytes: 5.8e6,
        mean_bytes: 179e3,
        sd_bytes: 389e3,
    },
    PageSpec {
        name: "cnn",
        objects: 277,
        total_bytes: 21e6,
        mean_bytes: 75e3,
        sd_bytes: 231e3,
    },
    PageSpec {
        name: "amazon",
        objects: 325,
        total_bytes: 8.9e6,
        mean_bytes: 27e3,
        sd_bytes: 121e3,
    },
    PageSpec {
        name: "facebook",
        objects: 162,
        total_bytes: 20e6,
        mean_bytes: 122e3,
        sd_bytes: 249e3,
    },
    PageSpec {
        name: "median",
        objects: 70,
        total_bytes: 2e6,
        mean_bytes: 2e6 / 70.0,
        sd_bytes: 4e6 / 70.0,
    },
];

pub fn page(name: &str) -> Result<PageSpec> {
    PAGES.iter().find(|p| p.name == name).copied().ok_or_else(|| {
        let known: Vec<&str> = PAGES.iter().map(|p| p.name).collect();
        anyhow!("unknown page `{name}` (known: {})", known.join(", "))
    })
}

/// Population mean and standard deviation.
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    (mean, (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt())
}

/// The page's object sizes for `seed`: log-normal in shape (exp(σ·z) of seeded normal z),
/// σ chosen by bisection so that this sample's coefficient of variation is the table's,
/// then scaled so its mean is the table's — the generated page has Table I's count, mean
/// and sd exactly (up to rounding to whole bytes), whatever the seed.
pub fn generate(spec: &PageSpec, scale: f64, seed: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7765_625f_7061_6765);
    let z: Vec<f64> = (0..spec.objects).map(|_| standard_normal(&mut rng)).collect();
    let cv_of = |sigma: f64| {
        let v: Vec<f64> = z.iter().map(|z| (sigma * z).exp()).collect();
        let (m, sd) = mean_sd(&v);
        sd / m
    };
    let target = spec.sd_bytes / spec.mean_bytes;
    let (mut lo, mut hi) = (0.0, 8.0);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if cv_of(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let raw: Vec<f64> = z.iter().map(|z| (lo * z).exp()).collect();
    let (m, _) = mean_sd(&raw);
    raw.iter()
        .map(|x| (x / m * spec.mean_bytes * scale).round().max(1.0) as u64)
        .collect()
}

/// `loads` page loads, each `gap_s` after the previous one ended.
pub struct PageLoads {
    sizes: Vec<u64>,
    /// At most this many requests outstanding after the HTML (HTTP/1.1's six
    /// connections); `None` asks for everything at once (HTTP/2).
    parallel: Option<usize>,
    loads: usize,
    gap_s: f64,
    /// Objects asked for so far.
    asked: usize,
}

impl PageLoads {
    pub fn new(sizes: Vec<u64>, parallel: Option<usize>, loads: usize, gap_s: f64) -> Self {
        PageLoads {
            sizes,
            parallel,
            loads,
            gap_s,
            asked: 0,
        }
    }

    fn ask(&mut self, at_s: f64) -> Request {
        let bytes = self.sizes[self.asked % self.sizes.len()];
        self.asked += 1;
        Request {
            bytes,
            at_s,
            deadline_s: None,
        }
    }

    /// Page load times (s) from a timeline of these loads; `None` for an unfinished one.
    pub fn load_times(&self, timeline: &[ObjectRecord]) -> Vec<Option<f64>> {
        let n = self.sizes.len();
        (0..self.loads)
            .map(|j| {
                let first = timeline.get(j * n)?;
                let last = timeline.get((j + 1) * n - 1)?;
                Some(last.t_complete_s? - first.t_request_s)
            })
            .collect()
    }
}

impl Application for PageLoads {
    fn requests(&mut self, now_s: f64, timeline: &[ObjectRecord]) -> Vec<Request> {
        let n = self.sizes.len();
        let total = n * self.loads;
        let done = timeline.iter().take_while(|o| o.t_complete_s.is_some()).count();
        if self.asked == 0 {
            return vec![self.ask(0.0)];
        }
        if self.asked == total {
            return Vec::new();
        }
        let page_start = self.asked / n * n;
        if self.asked == page_start && done == self.asked {
            // The previous page is complete: the next one's HTML after the gap.
            return vec![self.ask(now_s + self.gap_s)];
        }
        if done <= page_start {
            return Vec::new(); // waiting for this page's HTML
        }
        let page_end = page_start + n;
        let outstanding = self.asked - done;
        let room = self.parallel.map_or(usize::MAX, |p| p.saturating_sub(outstanding));
        let count = room.min(page_end - self.asked);
        (0..count).map(|_| self.ask(now_s)).collect()
    }

    fn finished(&self) -> bool {
        self.asked == self.sizes.len() * self.loads
    }
}

#[derive(Debug, Serialize)]
pub struct WebResult {
    pub scheme: String,
    pub page: &'static str,
    /// `1.1` (six connections) or `2` (one).
    pub http: String,
    pub objects: usize,
    pub page_bytes: u64,
    /// Median page load time over loads and seeds (ms).
    pub page_load_ms: f64,
    pub page_load_p90_ms: f64,
    pub summary: Summary,
}

/// Page loads per run and the gap between them (the paper's 1 s).
const GAP_S: f64 = 1.0;

pub fn run(setup: &Setup, args: &WorkloadArgs) -> Result<Vec<WebResult>> {
    let pages: Vec<PageSpec> = args.pages.iter().map(|p| page(p.trim())).collect::<Result<_>>()?;
    let mut versions = Vec::new();
    let asked: Vec<String> = if args.http.is_empty() {
        vec!["1.1".into(), "2".into()]
    } else {
        args.http.clone()
    };
    for v in &asked {
        versions.push(match v.trim() {
            "1.1" => ("1.1", Some(6)),
            "2" => ("2", None),
            other => bail!("--http `{other}`: expected 1.1 or 2"),
        });
    }
    if args.page_loads == 0 || args.page_loads > 100 {
        bail!("--page-loads must be in 1..=100");
    }
    let loads = args.page_loads as usize;
    let mut items = Vec::new();
    for scheme in &setup.schemes {
        for spec in &pages {
            for &(http, parallel) in &versions {
                for &seed in &setup.seeds {
                    items.push((scheme.as_str(), spec, http, parallel, seed));
                }
            }
        }
    }
    let times = setup.run_all(&items, |&(scheme, spec, _, parallel, seed)| {
        let mut app = PageLoads::new(generate(spec, setup.scale, seed), parallel, loads, GAP_S);
        let t = setup.run_one(scheme, seed, &mut app)?;
        Ok(app.load_times(&t))
    })?;
    let n = setup.seeds.len();
    let results: Vec<WebResult> = times
        .chunks(n)
        .enumerate()
        .map(|(k, chunk)| {
            let (scheme, spec, http, _, seed) = items[k * n];
            let runs: Vec<Option<f64>> = chunk.iter().flatten().map(|t| t.map(|s| s * 1e3)).collect();
            let summary = summarise(&runs);
            WebResult {
                scheme: scheme.to_string(),
                page: spec.name,
                http: http.to_string(),
                objects: spec.objects,
                page_bytes: generate(spec, setup.scale, seed).iter().sum(),
                page_load_ms: summary.median,
                page_load_p90_ms: summary.p90,
                summary,
            }
        })
        .collect();
    println!(
        "page load time, scenario {} (scale {}, {} seeds × {loads} loads): median / p90 in ms",
        setup.scenario.name, setup.scale, n
    );
    print!("{:<10} {:>4}", "page", "http");
    for s in &setup.schemes {
        print!(" {s:>18}");
    }
    println!();
    for spec in &pages {
        for &(http, _) in &versions {
            print!("{:<10} {http:>4}", spec.name);
            for s in &setup.schemes {
                let cell = results
                    .iter()
                    .find(|r| &r.scheme == s && r.page == spec.name && r.http == http)
                    .map_or("-".into(), |r| {
                        format!("{:.0}/{:.0}", r.page_load_ms, r.page_load_p90_ms)
                    });
                print!(" {cell:>18}");
            }
            println!();
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_pages_have_table_one_statistics_for_any_seed() {
        for spec in &PAGES {
            for seed in [1, 2, 99] {
                let sizes = generate(spec, 1.0, seed);
                assert_eq!(sizes.len(), spec.objects);
                let v: Vec<f64> = sizes.iter().map(|&b| b as f64).collect();
                let (mean, sd) = mean_sd(&v);
                assert!((mean / spec.mean_bytes - 1.0).abs() < 0.01, "{} mean {mean}", spec.name);
                assert!((sd / spec.sd_bytes - 1.0).abs() < 0.01, "{} sd {sd}", spec.name);
                // Table I's totals are count × mean up to its rounding (within 3 %).
                let total: f64 = v.iter().sum();
                assert!(
                    (total / spec.total_bytes - 1.0).abs() < 0.03,
                    "{} total {total}",
                    spec.name
                );
                assert_eq!(sizes, generate(spec, 1.0, seed));
            }
            assert_ne!(generate(spec, 1.0, 1), generate(spec, 1.0, 2));
        }
        assert!(page("yahoo").is_err());
    }

    fn done(bytes: u64, t_request_s: f64, t_complete_s: Option<f64>) -> ObjectRecord {
        ObjectRecord::hand_made(bytes, None, t_request_s, t_complete_s)
    }

    #[test]
    fn http1_keeps_six_outstanding_and_http2_asks_everything_after_the_html() {
        let sizes: Vec<u64> = (1..=10).collect();
        let mut h1 = PageLoads::new(sizes.clone(), Some(6), 2, 1.0);
        let mut t = vec![];
        assert_eq!(h1.requests(0.0, &t).len(), 1);
        t.push(done(1, 0.0, None));
        t[0].t_complete_s = Some(0.1);
        let next = h1.requests(0.1, &t);
        assert_eq!(next.len(), 6);
        t.extend(next.iter().map(|r| done(r.bytes, r.at_s, None)));
        // Two of the six arrive: two more are asked for.
        t[1].t_complete_s = Some(0.2);
        t[2].t_complete_s = Some(0.2);
        assert_eq!(h1.requests(0.2, &t).len(), 2);

        let mut h2 = PageLoads::new(sizes, None, 1, 1.0);
        let mut t = vec![done(1, 0.0, Some(0.1))];
        assert_eq!(h2.requests(0.0, &[]).len(), 1);
        let rest = h2.requests(0.1, &t);
        assert_eq!(rest.len(), 9);
        assert!(h2.finished());
        t.extend(rest.iter().map(|r| done(r.bytes, r.at_s, Some(0.5))));
        let times = h2.load_times(&t);
        assert_eq!(times.len(), 1);
        assert!((times[0].unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn the_next_page_starts_a_gap_after_the_last_one_ended() {
        let mut app = PageLoads::new(vec![5, 5], None, 2, 1.0);
        let mut t = vec![];
        let html = app.requests(0.0, &t);
        t.push(done(html[0].bytes, 0.0, Some(0.1)));
        let rest = app.requests(0.1, &t);
        t.push(done(rest[0].bytes, 0.1, Some(0.3)));
        let next = app.requests(0.3, &t);
        assert_eq!(next.len(), 1);
        assert!((next[0].at_s - 1.3).abs() < 1e-12);
        t.push(done(5, 1.3, Some(1.4)));
        t.push(done(5, 1.4, None));
        assert_eq!(app.load_times(&t), vec![Some(0.3), None]);
    }
}
