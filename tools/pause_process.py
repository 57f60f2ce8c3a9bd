#!/usr/bin/env python3
"""Runs a command and stops it (SIGSTOP) for PAUSE ms in every PERIOD ms, as a hypervisor's
steal or a busy phone stops a process: on the testbed (`fbdt-lab run --backend emu`) the
emulator and the endpoints pause while the kernel's TCP keeps running, so each path's packets
are held and then released together — a bursty path (docs/congestion.md, "Bursty paths").

    tools/pause_process.py --pause-ms 3 --period-ms 10 -- \\
        target/release/fbdt-lab run tc-normal --backend emu --scale 0.3 --schemes fbdt

The command runs undisturbed for --settle-s first (namespaces, handshakes). Exits with the
command's status; the command is never left stopped.
"""
import argparse
import os
import signal
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pause-ms", type=float, required=True)
    ap.add_argument("--period-ms", type=float, required=True)
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command given (put it after --)")
    if not 0 < a.pause_ms < a.period_ms:
        ap.error("need 0 < --pause-ms < --period-ms")
    child = subprocess.Popen(cmd)
    pause, rest = a.pause_ms / 1e3, (a.period_ms - a.pause_ms) / 1e3
    try:
        time.sleep(a.settle_s)
        while child.poll() is None:
            try:
                os.kill(child.pid, signal.SIGSTOP)
                time.sleep(pause)
            finally:
                os.kill(child.pid, signal.SIGCONT)
            time.sleep(rest)
    except ProcessLookupError:
        pass
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
