//! `fbdt send` / `fbdt recv`: one stream, a progress bar, an end-to-end SHA-256 check
//! (the receiver sends its digest back; the sender compares).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::net_args::NetArgs;

#[derive(clap::Args)]
pub struct RecvArgs {
    /// Address to accept paths on (repeat for several).
    #[arg(long, required = true, value_name = "IP:PORT")]
    listen: Vec<SocketAddr>,
    /// Where the bytes go; `-` = stdout.
    #[arg(long, short, value_name = "FILE|-")]
    output: String,
    /// Take the stream of whichever sender reaches this port first. Without it the
    /// receiver needs --token/--token-file or --client-ca (TLS), so only your sender can
    /// write the output.
    #[arg(long)]
    allow_anyone: bool,
    #[command(flatten)]
    net: NetArgs,
}

#[derive(clap::Args)]
pub struct SendArgs {
    /// File to send; `-` = stdin.
    #[arg(value_name = "FILE|-")]
    input: String,
    /// One path per interface: [LOCAL_IP=|%IFACE=]SERVER_IP:PORT (path i = i-th --path).
    #[arg(long = "path", required = true, value_name = "PATH")]
    paths: Vec<fbdt_net::PathSpec>,
    #[command(flatten)]
    net: NetArgs,
}

fn bar(total: Option<u64>) -> ProgressBar {
    let pb = match total {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}")
                .expect("template"),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} {binary_bytes_per_sec} {elapsed}").expect("template"),
        ),
    };
    pb.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    pb
}

/// Copies `r` (named `from` in errors) to `w` (named `to`), hashing and counting.
async fn pump(
    mut r: impl AsyncRead + Unpin,
    mut w: impl AsyncWrite + Unpin,
    pb: &ProgressBar,
    from: &str,
    to: &str,
) -> anyhow::Result<(u64, [u8; 32])> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).await.with_context(|| format!("reading {from}"))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        w.write_all(&buf[..k]).await.with_context(|| format!("writing {to}"))?;
        n += k as u64;
        pb.set_position(n);
    }
    w.flush().await.with_context(|| format!("writing {to}"))?;
    Ok((n, h.finalize().into()))
}

pub async fn recv(a: RecvArgs) -> anyhow::Result<()> {
    // The one session is the first that arrives: without a token or client certificate,
    // anyone who reaches the port first writes the output (and the real sender is told
    // "server full").
    let sec = &a.net.security;
    if !sec.requires_token() && !sec.requires_client_cert() {
        if !a.allow_anyone {
            bail!(
                "recv: give --token/--token-file or --client-ca so only your sender can write {}, \
                 or --allow-anyone to take the first sender that reaches this port",
                a.output
            );
        }
    }
    // The output is opened before anything listens: a path that cannot be written fails
    // now, not after a sender connected.
    let out: Box<dyn AsyncWrite + Unpin + Send> = if a.output == "-" {
        Box::new(tokio::io::stdout())
    } else {
        Box::new(
            tokio::fs::File::create(&a.output)
                .await
                .with_context(|| format!("cannot create {}", a.output))?,
        )
    };
    if a.allow_anyone && !sec.requires_token() && !sec.requires_client_cert() {
        log!(
            "fbdt: warning: recv --allow-anyone: the first sender to reach this port writes {}",
            a.output
        );
    }
    // One session: a second HELLO is refused while it lives, but the listener stays open
    // for its late paths and re-joins until it ends.
    let cfg = fbdt_net::NetConfig {
        max_sessions: 1,
        ..a.net.server_config()?
    };
    let mut l = fbdt_net::listen(&a.listen, cfg).await?;
    eprintln!("listening on {:?}", l.local_addrs());
    let session = l.accept().await.context("listener ended")?;
    let (r, mut w) = tokio::io::split(session);
    let pb = bar(None);
    let to = if a.output == "-" { "stdout" } else { &a.output };
    let (n, digest) = pump(r, out, &pb, "the session", to).await?;
    pb.finish_and_clear();
    w.write_all(&digest).await?;
    w.shutdown().await?;
    drop(l);
    eprintln!("received {n} bytes  sha256 {}", hex(&digest));
    Ok(())
}

pub async fn send(a: SendArgs) -> anyhow::Result<()> {
    let (input, total): (Box<dyn AsyncRead + Unpin + Send>, Option<u64>) = if a.input == "-" {
        (Box::new(tokio::io::stdin()), None)
    } else {
        let f = tokio::fs::File::open(PathBuf::from(&a.input))
            .await
            .with_context(|| format!("cannot open {}", a.input))?;
        let meta = f.metadata().await.with_context(|| format!("cannot open {}", a.input))?;
        if meta.is_dir() {
            bail!("{}: is a directory (send one file, or an archive of it)", a.input);
        }
        (Box::new(f), meta.is_file().then_some(meta.len()))
    };
    let session = fbdt_net::connect(a.paths, a.net.client_config()?).await?;
    let (mut r, mut w) = tokio::io::split(session);
    let pb = bar(total);
    let from = if a.input == "-" { "stdin" } else { &a.input };
    let (n, digest) = pump(input, &mut w, &pb, from, "the session").await?;
    w.shutdown()
        .await
        .context("the receiver did not acknowledge every byte")?;
    pb.finish_and_clear();
    // The answer is a 32-byte digest: read one byte more to tell a longer one, no further.
    let mut theirs = Vec::new();
    (&mut r).take(33).read_to_end(&mut theirs).await?;
    eprintln!("sent {n} bytes  sha256 {}", hex(&digest));
    if theirs.len() != 32 {
        bail!("the receiver sent no digest");
    }
    if theirs != digest {
        bail!("receiver's sha256 {} differs", hex(&theirs));
    }
    eprintln!("receiver's sha256 matches");
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
