//! `fbdt send` / `fbdt recv`: one stream, a progress bar, an end-to-end SHA-256 check
//! (the receiver sends its digest back; the sender compares).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::{hex, NetArgs};

#[derive(clap::Args)]
pub struct RecvArgs {
    /// Address to accept paths on (repeat for several).
    #[arg(long, required = true, value_name = "IP:PORT")]
    listen: Vec<SocketAddr>,
    /// Where the bytes go; `-` = stdout.
    #[arg(long, short, value_name = "FILE|-")]
    output: String,
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

/// Copies `r` to `w`, hashing and counting.
async fn pump(
    mut r: impl AsyncRead + Unpin,
    mut w: impl AsyncWrite + Unpin,
    pb: &ProgressBar,
) -> anyhow::Result<(u64, [u8; 32])> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).await?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        w.write_all(&buf[..k]).await?;
        n += k as u64;
        pb.set_position(n);
    }
    w.flush().await?;
    Ok((n, h.finalize().into()))
}

pub async fn recv(a: RecvArgs) -> anyhow::Result<()> {
    let mut l = fbdt_net::listen(&a.listen, a.net.server_config()?).await?;
    eprintln!("listening on {:?}", l.local_addrs());
    let session = l.accept().await.context("listener ended")?;
    drop(l);
    let (r, mut w) = tokio::io::split(session);
    let out: Box<dyn AsyncWrite + Unpin + Send> = if a.output == "-" {
        Box::new(tokio::io::stdout())
    } else {
        Box::new(
            tokio::fs::File::create(&a.output)
                .await
                .with_context(|| a.output.clone())?,
        )
    };
    let pb = bar(None);
    let (n, digest) = pump(r, out, &pb).await?;
    pb.finish_and_clear();
    w.write_all(&digest).await?;
    w.shutdown().await?;
    eprintln!("received {n} bytes  sha256 {}", hex(&digest));
    Ok(())
}

pub async fn send(a: SendArgs) -> anyhow::Result<()> {
    let (input, total): (Box<dyn AsyncRead + Unpin + Send>, Option<u64>) = if a.input == "-" {
        (Box::new(tokio::io::stdin()), None)
    } else {
        let f = tokio::fs::File::open(PathBuf::from(&a.input))
            .await
            .with_context(|| a.input.clone())?;
        let len = f.metadata().await.ok().map(|m| m.len());
        (Box::new(f), len)
    };
    let session = fbdt_net::connect(a.paths, a.net.client_config()?).await?;
    let (mut r, mut w) = tokio::io::split(session);
    let pb = bar(total);
    let (n, digest) = pump(input, &mut w, &pb).await?;
    w.shutdown()
        .await
        .context("the receiver did not acknowledge every byte")?;
    pb.finish_and_clear();
    let mut theirs = Vec::new();
    r.read_to_end(&mut theirs).await?;
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
