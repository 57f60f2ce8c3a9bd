//! Building a testbed: namespaces, veths, the emulator, addresses, policy routing and
//! kernel MPTCP endpoints.

use super::*;

fn mac(tag: u8, k: u32, n: usize) -> [u8; 6] {
    // Locally administered unicast (02:…), distinct per role (tag) and path (n).
    [0x02, 0xfb, tag, (k & 0xff) as u8, 0x00, n as u8]
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl Testbed {
    pub(super) fn setup(&mut self, k: u32) -> Result<()> {
        for name in [&self.client_ns, &self.emu_ns, &self.server_ns] {
            if ns::exists(name) {
                return Err(Error::NamespaceExists(name.clone()));
            }
            self.netns.push(NetNs::new(name).map_err(|e| Error::Netns {
                namespace: name.clone(),
                op: "create",
                detail: e.to_string(),
            })?);
        }
        for name in [&self.client_ns, &self.emu_ns, &self.server_ns] {
            ns::ip(Some(name), &["link", "set", "lo", "up"])?;
            ns::sysctl(name, "net.ipv6.conf.all.disable_ipv6", "1")?;
            ns::sysctl(name, "net.ipv6.conf.default.disable_ipv6", "1")?;
            ns::sysctl(name, "net.ipv4.conf.all.rp_filter", "0")?;
            ns::sysctl(name, "net.ipv4.conf.default.rp_filter", "0")?;
        }
        // The scheme's paths, then a shared bottleneck's competing flows' paths.
        let all: Vec<(PathInfo, PathPlan)> = self
            .paths
            .iter()
            .cloned()
            .zip(self.spec.paths.iter().cloned())
            .chain(self.competitors.iter().cloned())
            .collect();
        let pairs: Vec<PairSpec> = all
            .iter()
            .map(|(pi, pp)| {
                let n = pi.index + 1;
                PairSpec {
                    cli_tmp: format!("c{n}"),
                    emu_c: emu_client_dev(n),
                    emu_s: format!("es{n}"),
                    srv_tmp: format!("s{n}"),
                    cli_mac: mac(0x01, k, n),
                    emu_c_mac: mac(0x11, k, n),
                    emu_s_mac: mac(0x12, k, n),
                    srv_mac: mac(0x02, k, n),
                    cli_ip: pi.client_ip,
                    srv_ip: pi.server_ip,
                    prefix: 24,
                    emu_c_ip: Ipv4Addr::new(10, 201, n as u8, 1),
                    emu_s_ip: Ipv4Addr::new(10, 201, n as u8, 2),
                    queue_packets: pp.queue_packets,
                    radio: pp.radio.map(Into::into),
                    bursts: pp.bursts,
                    initial: pp.steps[0],
                    seed: self.spec.seed.wrapping_add(pi.index as u64),
                }
            })
            .collect();
        let shared = self.spec.bottleneck.as_ref().map(|b| crate::emu::SharedLink {
            members: b
                .paths
                .iter()
                .copied()
                .chain(self.competitors.iter().map(|(p, _)| p.index))
                .collect(),
            rate_bps: crate::spec::bps(b.rate_mbps),
            queue_packets: b.queue_packets,
        });
        let emu = Emulator::start(
            self.netns[0].clone(),
            self.netns[1].clone(),
            self.netns[2].clone(),
            &self.emu_ns,
            pairs.clone(),
            shared,
            &self.opts,
        )?;
        let controls = emu.take_paths(&mut self.emu);
        self.controls = Arc::new(controls);
        let mtu = self.opts.mtu.to_string();
        let rps_mask = self
            .opts
            .receive_steered()
            .then(crate::emu::endpoint_rps_mask)
            .flatten();
        for ((pi, plan), pair) in all.iter().zip(&pairs) {
            for (nsn, tmp, name) in [
                (&self.client_ns, &pair.cli_tmp, &pi.client_if),
                (&self.server_ns, &pair.srv_tmp, &pi.server_if),
            ] {
                let ns_name = nsn.as_str();
                let nsn = Some(ns_name);
                ns::ip(nsn, &["link", "set", "dev", tmp, "down"])?;
                if tmp != name {
                    ns::ip(nsn, &["link", "set", "dev", tmp, "name", name])?;
                }
                ns::ip(nsn, &["link", "set", "dev", name, "mtu", &mtu, "up"])?;
                if let Some(mask) = rps_mask.as_deref() {
                    ns::steer_receive(ns_name, name, mask)?;
                }
            }
            for dev in [&pair.emu_c, &pair.emu_s] {
                ns::ip(Some(&self.emu_ns), &["link", "set", "dev", dev, "mtu", &mtu])?;
            }
            if let Some(us) = self.opts.gso_units() {
                self.enable_gso_units(pi, plan.peak_rate_mbps(), pair, us)?;
            }
            // ARP cannot cross the emulator (it forwards unicast only): static neighbours.
            let (c, s) = (pi.client_ip.to_string(), pi.server_ip.to_string());
            ns::ip(
                Some(&self.client_ns),
                &[
                    "neigh",
                    "replace",
                    &s,
                    "lladdr",
                    &fmt_mac(&pair.srv_mac),
                    "dev",
                    &pi.client_if,
                    "nud",
                    "permanent",
                ],
            )?;
            ns::ip(
                Some(&self.server_ns),
                &[
                    "neigh",
                    "replace",
                    &c,
                    "lladdr",
                    &fmt_mac(&pair.cli_mac),
                    "dev",
                    &pi.server_if,
                    "nud",
                    "permanent",
                ],
            )?;
            // Source routing: traffic from this path's address uses this path's table, whose
            // default route leaves by this path's interface (kernel MPTCP selftests pattern).
            let table = pi.table.to_string();
            ns::ip(
                Some(&self.client_ns),
                &[
                    "route",
                    "add",
                    &format!("10.200.{}.0/24", pi.index + 1),
                    "dev",
                    &pi.client_if,
                    "scope",
                    "link",
                    "table",
                    &table,
                ],
            )?;
            ns::ip(
                Some(&self.client_ns),
                &[
                    "route",
                    "add",
                    "default",
                    "via",
                    &s,
                    "dev",
                    &pi.client_if,
                    "table",
                    &table,
                ],
            )?;
            ns::ip(
                Some(&self.client_ns),
                &[
                    "rule",
                    "add",
                    "from",
                    &c,
                    "table",
                    &table,
                    "pref",
                    &(1000 + pi.index + 1).to_string(),
                ],
            )?;
            // The server answers each client address by the path it belongs to (connected route);
            // a default route via path 1 covers anything else.
            for nsn in [&self.client_ns, &self.server_ns] {
                ns::sysctl(nsn, &format!("net.ipv4.conf.{}.rp_filter", pi.client_if), "0")?;
            }
        }
        let p0 = &self.paths[0];
        ns::ip(
            Some(&self.client_ns),
            &[
                "route",
                "add",
                "default",
                "via",
                &p0.server_ip.to_string(),
                "dev",
                &p0.client_if,
            ],
        )?;
        ns::ip(
            Some(&self.server_ns),
            &[
                "route",
                "add",
                "default",
                "via",
                &p0.client_ip.to_string(),
                "dev",
                &p0.server_if,
            ],
        )?;
        // Congestion control is per namespace; sockets inherit it at creation.
        let cc = &self.spec.congestion_control;
        for nsn in [&self.client_ns, &self.server_ns] {
            let avail = ns::sysctl_get(nsn, "net.ipv4.tcp_available_congestion_control")?;
            if !avail.split_whitespace().any(|a| a == cc) {
                return Err(Error::CongestionControl {
                    cc: cc.clone(),
                    available: avail,
                });
            }
            allow_congestion_control(cc)?;
            ns::sysctl(nsn, "net.ipv4.tcp_congestion_control", cc)?;
            // No cached ssthresh/RTT between runs and paths: every run starts cold.
            ns::sysctl(nsn, "net.ipv4.tcp_no_metrics_save", "1")?;
            if let Some(max) = self.opts.tcp_buffer_max {
                for key in ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] {
                    let cur = ns::sysctl_get(nsn, key)?;
                    let f: Vec<&str> = cur.split_whitespace().collect();
                    if f.len() == 3 {
                        ns::sysctl(nsn, key, &format!("{} {} {max}", f[0], f[1]))?;
                    }
                }
            }
        }
        if self.opts.mptcp {
            let n = self.paths.len().to_string();
            for nsn in [&self.client_ns, &self.server_ns] {
                ns::sysctl(nsn, "net.mptcp.enabled", "1")?;
                ns::ip(
                    Some(nsn),
                    &["mptcp", "limits", "set", "subflow", &n, "add_addr_accepted", &n],
                )?;
            }
            for pi in &self.paths {
                ns::ip(
                    Some(&self.client_ns),
                    &[
                        "mptcp",
                        "endpoint",
                        "add",
                        &pi.client_ip.to_string(),
                        "dev",
                        &pi.client_if,
                        "subflow",
                    ],
                )?;
            }
        }
        tracing::info!(
            client = %self.client_ns,
            server = %self.server_ns,
            paths = self.paths.len(),
            competing = self.competitors.len(),
            "testbed up"
        );
        Ok(())
    }
}

/// Outside the initial namespace the kernel only accepts a default congestion control
/// listed in the host-wide `net.ipv4.tcp_allowed_congestion_control` (else EPERM). Adds `cc`
/// to that list if missing (additive; never removed, other testbeds may rely on it).
fn allow_congestion_control(cc: &str) -> Result<()> {
    const P: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
    let cur = std::fs::read_to_string(P).map_err(Error::file(P))?;
    if cur.split_whitespace().any(|a| a == cc) {
        return Ok(());
    }
    let new = format!("{} {cc}", cur.trim());
    std::fs::write(P, new.as_bytes()).map_err(Error::file(P))?;
    tracing::info!("added {cc} to {P}");
    Ok(())
}

impl Emulator {
    /// Moves the path controls out and parks the emulator in `slot` (so the testbed can
    /// share the controls with the player thread).
    fn take_paths(mut self, slot: &mut Option<Emulator>) -> Vec<PathControl> {
        let v = std::mem::take(&mut self.paths);
        *slot = Some(self);
        v
    }
}

impl Testbed {
    /// Lets path `pi`'s TSO super-packets through the emulator whole: segmentation offload on
    /// all four veth ends (an end without it would cut units in software), and the endpoints'
    /// units' payload no longer on the link than `airtime_us` at the path's peak rate.
    fn enable_gso_units(&self, pi: &PathInfo, peak: f64, pair: &PairSpec, airtime_us: u32) -> Result<()> {
        use crate::emu::offload;
        let unit = offload::gso_max_size(peak, std::time::Duration::from_micros(airtime_us.into()), self.opts.mtu);
        for (ns_name, dev) in [(&self.client_ns, &pi.client_if), (&self.server_ns, &pi.server_if)] {
            ns::run_in(ns_name, || offload::enable_segmentation_offload(dev))??;
            ns::ip(
                Some(ns_name),
                &["link", "set", "dev", dev, "gso_max_size", &unit.to_string()],
            )?;
        }
        for dev in [&pair.emu_c, &pair.emu_s] {
            ns::run_in(&self.emu_ns, || offload::enable_segmentation_offload(dev))??;
        }
        Ok(())
    }
}
