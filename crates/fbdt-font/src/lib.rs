//! The font for plot text: a TrueType file read at run time (Debian package
//! fonts-dejavu-core, or the file named by `JPOC_FONT`) and registered with plotters under
//! [`FAMILY`], once per process. Both the lab's figures and jpoc's use it.

use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

/// Where distributions put DejaVu Sans.
const CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Environment variable naming a .ttf file to use instead.
pub const ENV: &str = "JPOC_FONT";

/// The family name plot text asks for.
pub const FAMILY: &str = "sans-serif";

/// Why no font could be registered.
#[derive(Clone, Debug, thiserror::Error)]
pub enum FontError {
    #[error("{0} is not a usable TrueType font")]
    Unusable(String),
    #[error(
        "no font found for plot text (tried {0}); install the Debian package fonts-dejavu-core \
         or set JPOC_FONT to a .ttf file"
    )]
    NotFound(String),
}

/// Registers the font once per process; later calls return the first outcome.
pub fn ensure() -> Result<(), FontError> {
    static DONE: OnceLock<Result<(), FontError>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var(ENV).ok();
        let mut tried = Vec::new();
        for path in env.iter().map(String::as_str).chain(CANDIDATES) {
            tried.push(path);
            if let Ok(bytes) = std::fs::read(path) {
                // plotters keeps a &'static reference to the font bytes for the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return register_font(FAMILY, FontStyle::Normal, bytes)
                    .map_err(|_| FontError::Unusable(path.to_string()));
            }
        }
        Err(FontError::NotFound(tried.join(", ")))
    })
    .clone()
}
