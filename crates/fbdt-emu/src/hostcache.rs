//! The calibrated scale, cached per host: a measurement holds only for the machine it was
//! taken on (CPU model, online cores, kernel), so that is the cache's key, next to what was
//! calibrated (scenario, MTU, emulator threads).
//!
//! Location: `$FBDT_CALIBRATION_CACHE` if set, else `$XDG_CACHE_HOME/fbdt/calibration.json`,
//! else `$HOME/.cache/fbdt/calibration.json`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What identifies "this machine" for a calibration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostKey {
    /// `model name` of the first CPU in /proc/cpuinfo.
    pub cpu_model: String,
    /// Online cores.
    pub cores: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
}

impl HostKey {
    /// This machine's key.
    pub fn current() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Self {
            cpu_model,
            cores: crate::scenario::cores(),
            kernel,
        }
    }
}

/// What was calibrated, besides the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    pub scenario: String,
    /// The scenario's unscaled peak total rate, Mbit/s (a changed scenario file misses).
    pub peak_total_mbps: f64,
    pub mtu: u32,
    pub emu_threads: usize,
    /// Where the rate limit ran; entries written before the choice existed were rattan's.
    #[serde(default = "before_the_choice")]
    pub datapath: crate::testbed::Datapath,
    /// The endpoints' receive work steered off the emulator's core
    /// ([`crate::TestbedOptions::steer_receive`]); entries from before it were without.
    #[serde(default)]
    pub receive_steered: bool,
    /// `direct` received through a TPACKET_V3 ring ([`crate::TestbedOptions::packet_rx_ring`]);
    /// entries from before it were without.
    #[serde(default)]
    pub packet_rx_ring: bool,
    /// `direct` with GSO units of this airtime, µs ([`crate::TestbedOptions::gso_unit_airtime_us`]);
    /// entries from before it were without.
    #[serde(default)]
    pub gso_unit_airtime_us: Option<u32>,
}

/// The datapath of cache entries written before there was a choice.
fn before_the_choice() -> crate::testbed::Datapath {
    crate::testbed::Datapath::Rattan
}

impl Subject {
    fn matches(&self, o: &Subject) -> bool {
        self.scenario == o.scenario
            && self.mtu == o.mtu
            && self.emu_threads == o.emu_threads
            && self.datapath == o.datapath
            && self.receive_steered == o.receive_steered
            && self.packet_rx_ring == o.packet_rx_ring
            && self.gso_unit_airtime_us == o.gso_unit_airtime_us
            && (self.peak_total_mbps - o.peak_total_mbps).abs() <= 0.1 * self.peak_total_mbps.max(o.peak_total_mbps)
    }
}

/// What a faithful scale means: raised whenever the search's criteria change, so entries
/// found under the old ones are measured again. 2: the endpoints need CPU to spare
/// (`calibrate::ENDPOINT_HEADROOM`). 3: the search starts at the top
/// (`calibrate::SEARCH_START`).
const SEARCH_RULES: u32 = 3;

/// This build of the emulator: the crate version, the search's rules, and whether it is a
/// debug build (an unoptimised emulator is several times slower).
fn build_version() -> String {
    format!(
        "{}+rules{SEARCH_RULES}{}",
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) { "-debug" } else { "" }
    )
}

/// One cached calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub host: HostKey,
    pub subject: Subject,
    pub scale: f64,
    /// Version of fbdt-emu that measured it, `-debug` for unoptimised builds (a new
    /// emulator datapath or another build profile misses).
    pub version: String,
    /// Unix time of the measurement, seconds.
    pub measured_unix_s: u64,
    /// How long the calibration took, seconds.
    pub took_s: f64,
}

/// The cache file: every calibration of every host that used it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScaleCache {
    pub entries: Vec<Entry>,
}

impl ScaleCache {
    /// Where the cache lives on this machine (see the module doc).
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os("FBDT_CALIBRATION_CACHE") {
            return PathBuf::from(p);
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("fbdt").join("calibration.json")
    }

    /// Reads the cache; a missing file is an empty cache, an unreadable one an error.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(t) => Ok(serde_json::from_str(&t)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(Error::File {
                path: path.to_path_buf(),
                source: e,
            }),
        }
    }

    /// Reads the cache, applies `change` and writes it back, holding the cache's lock
    /// throughout: two runs calibrating at once (two `fbdt-lab` processes, or CI beside a
    /// developer) each keep their entry instead of the later writer dropping the other's.
    pub fn update(path: &Path, change: impl FnOnce(&mut Self)) -> Result<()> {
        let _lock = CacheLock::acquire(path)?;
        let mut cache = Self::load(path)?;
        change(&mut cache);
        cache.save(path)
    }

    /// Writes the cache (creating its directory), atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(Error::file(d))?;
        }
        // Per process: two writers renaming one temp file would publish a half-written one.
        let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        std::fs::write(&tmp, serde_json::to_string_pretty(self)? + "\n").map_err(Error::file(&tmp))?;
        std::fs::rename(&tmp, path).map_err(Error::file(path))
    }

    /// The scale measured for `subject` on `host` by this build, if any. The peak rate may
    /// differ by up to 10% (a shortened run of a scenario with random rates has a slightly
    /// different peak; the emulator's ceiling is the same).
    pub fn lookup(&self, host: &HostKey, subject: &Subject) -> Option<&Entry> {
        self.entries
            .iter()
            .rev()
            .find(|e| &e.host == host && e.subject.matches(subject) && e.version == build_version())
    }

    /// Records a calibration, replacing an older one of the same host and subject.
    pub fn insert(&mut self, host: HostKey, subject: Subject, scale: f64, took_s: f64) {
        self.entries
            .retain(|e| !(e.host == host && e.subject.matches(&subject) && e.version == build_version()));
        let measured_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.entries.push(Entry {
            host,
            subject,
            scale,
            version: build_version(),
            measured_unix_s,
            took_s,
        });
    }

    /// Records `scale` for `subject` if it is below the cached one (or none is cached);
    /// keeps the original calibration's duration.
    pub fn lower(&mut self, host: HostKey, subject: Subject, scale: f64) {
        let cached = self.lookup(&host, &subject).map(|e| (e.scale, e.took_s));
        match cached {
            Some((s, _)) if s <= scale => {}
            Some((_, took_s)) => self.insert(host, subject, scale, took_s),
            None => self.insert(host, subject, scale, 0.0),
        }
    }
}

/// An exclusive `flock` on `<cache>.lock`, released when dropped (closing the file releases
/// it, also when the process dies).
struct CacheLock {
    _held: std::fs::File,
}

impl CacheLock {
    fn acquire(cache: &Path) -> Result<Self> {
        use std::os::fd::AsRawFd;
        if let Some(d) = cache.parent() {
            std::fs::create_dir_all(d).map_err(Error::file(d))?;
        }
        let path = cache.with_extension("json.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::file(&path))?;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is shared.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Self { _held: file });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::File { path, source: e });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            scenario: "los".into(),
            peak_total_mbps: 2000.0,
            mtu: 1500,
            emu_threads: 1,
            datapath: crate::testbed::Datapath::Rattan,
            receive_steered: false,
            packet_rx_ring: false,
            gso_unit_airtime_us: None,
        }
    }

    fn fake_host() -> HostKey {
        HostKey {
            cpu_model: "Fake CPU @ 2.0GHz".into(),
            cores: 2,
            kernel: "6.1.0-test".into(),
        }
    }

    #[test]
    fn another_host_misses_the_cache() {
        let dir = std::env::temp_dir().join(format!("fbdt-hostcache-test-{}", std::process::id()));
        let path = dir.join("calibration.json");
        let here = fake_host();
        let mut c = ScaleCache::load(&path).unwrap();
        assert!(c.entries.is_empty());
        c.insert(here.clone(), subject(), 0.15, 30.0);
        c.save(&path).unwrap();
        let mut c = ScaleCache::load(&path).unwrap();
        assert_eq!(c.lookup(&here, &subject()).map(|e| e.scale), Some(0.15));
        // A faster CPU, more cores, a new kernel, another MTU: each is a miss.
        let cpu = HostKey {
            cpu_model: "Fake CPU @ 4.0GHz".into(),
            ..here.clone()
        };
        let cores = HostKey {
            cores: 4,
            ..here.clone()
        };
        let kernel = HostKey {
            kernel: "6.12.0-test".into(),
            ..here.clone()
        };
        for h in [cpu, cores, kernel] {
            assert!(c.lookup(&h, &subject()).is_none(), "{h:?}");
        }
        let jumbo = Subject { mtu: 9000, ..subject() };
        assert!(c.lookup(&here, &jumbo).is_none());
        let kernel_rate = Subject {
            datapath: crate::testbed::Datapath::KernelRate,
            ..subject()
        };
        assert!(c.lookup(&here, &kernel_rate).is_none());
        // Steering the endpoints' receive work off the emulator's core changes its ceiling.
        let steered = Subject {
            receive_steered: true,
            ..subject()
        };
        assert!(c.lookup(&here, &steered).is_none());
        // So does another receive path.
        let ring = Subject {
            packet_rx_ring: true,
            ..subject()
        };
        assert!(c.lookup(&here, &ring).is_none());
        // And GSO units, or units of another airtime.
        let units = |us| Subject {
            gso_unit_airtime_us: Some(us),
            ..subject()
        };
        assert!(c.lookup(&here, &units(250)).is_none());
        let mut with_units = ScaleCache::default();
        with_units.insert(here.clone(), units(250), 0.5, 30.0);
        assert!(with_units.lookup(&here, &units(250)).is_some());
        assert!(with_units.lookup(&here, &units(100)).is_none());
        assert!(with_units.lookup(&here, &subject()).is_none());
        // A shortened run of the same scenario (peak within 10%) hits; another scenario misses.
        let short = Subject {
            peak_total_mbps: 1900.0,
            ..subject()
        };
        assert_eq!(c.lookup(&here, &short).map(|e| e.scale), Some(0.15));
        let other = Subject {
            scenario: "blockage".into(),
            ..subject()
        };
        assert!(c.lookup(&here, &other).is_none());
        // Re-calibrating replaces the entry.
        c.insert(here.clone(), subject(), 0.12, 25.0);
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.lookup(&here, &subject()).map(|e| e.scale), Some(0.12));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_updates_keep_every_entry() {
        let dir = std::env::temp_dir().join(format!("fbdt-hostcache-race-{}", std::process::id()));
        let path = dir.join("calibration.json");
        let host = fake_host();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (path, host) = (path.clone(), host.clone());
                std::thread::spawn(move || {
                    let s = Subject {
                        scenario: format!("scenario-{i}"),
                        ..subject()
                    };
                    ScaleCache::update(&path, |c| c.insert(host, s, 0.1, 1.0)).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c = ScaleCache::load(&path).unwrap();
        assert_eq!(
            c.entries.len(),
            8,
            "{:?}",
            c.entries.iter().map(|e| &e.subject.scenario).collect::<Vec<_>>()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn auto_scale_only_lowers_the_cached_scale() {
        let host = fake_host();
        let mut c = ScaleCache::default();
        c.insert(host.clone(), subject(), 0.2, 30.0);
        c.lower(host.clone(), subject(), 0.3);
        assert_eq!(c.lookup(&host, &subject()).map(|e| e.scale), Some(0.2));
        c.lower(host.clone(), subject(), 0.133);
        let e = c.lookup(&host, &subject()).unwrap();
        assert_eq!((e.scale, e.took_s, c.entries.len()), (0.133, 30.0, 1));
    }

    #[test]
    fn entries_from_before_the_datapath_choice_are_rattan() {
        let old = r#"{"scenario":"los","peak_total_mbps":2000.0,"mtu":1500,"emu_threads":1}"#;
        let s: Subject = serde_json::from_str(old).unwrap();
        assert_eq!(s.datapath, crate::testbed::Datapath::Rattan);
    }

    #[test]
    fn corrupt_cache_is_an_error_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("fbdt-hostcache-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("calibration.json");
        std::fs::write(&path, "{ not json").unwrap();
        assert!(ScaleCache::load(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
