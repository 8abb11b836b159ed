//! The exposition text on fixture trees: format (HELP/TYPE once per family, before its
//! samples; label escaping), units (4-octet words to bytes), counters that only grow between
//! scrapes, and the attachment info metrics from records.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::attach::store::Store;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::kernel::topology::{CounterDir, CounterListings, RdmaSysfs, ScrapeSink};
use crate::testutil::TempDir;

const PF_PORT: &str = "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0/ports/1";
const RXE_PORT: &str = "devices/virtual/infiniband/rxe0/ports/1";

fn counters(fx: &SysfsFixture, xmit_words: u64, hw: u64) {
    for (name, v) in [
        ("port_xmit_data", xmit_words),
        ("port_rcv_data", xmit_words / 2),
        ("port_xmit_packets", xmit_words / 64),
        ("port_rcv_packets", xmit_words / 128),
        ("symbol_error", 3),
        ("link_downed", 1),
    ] {
        fx.write_attr(format!("{PF_PORT}/counters/{name}"), &v.to_string())
            .unwrap();
    }
    fx.write_attr(
        format!("{PF_PORT}/hw_counters/out_of_buffer"),
        &hw.to_string(),
    )
    .unwrap();
    fx.write_attr(format!("{PF_PORT}/hw_counters/lifespan"), "10")
        .unwrap();
    for (name, v) in [
        ("sent_pkts", hw * 3),
        ("rcvd_pkts", hw * 2),
        ("link_downed", 0),
    ] {
        fx.write_attr(format!("{RXE_PORT}/hw_counters/{name}"), &v.to_string())
            .unwrap();
    }
}

/// A parsed exposition: samples by `name{labels}` and the families in order.
#[derive(Debug, Default)]
struct Parsed {
    samples: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
}

/// Parses and validates the text format: every sample's family has HELP then TYPE before its
/// first sample, each once; names and label names match the allowed patterns; label values
/// are properly quoted with only `\\`, `\"` and `\n` escapes; values are numbers.
fn parse(text: &str) -> Parsed {
    let mut p = Parsed::default();
    let mut helped = std::collections::BTreeSet::new();
    let mut current: Option<String> = None;
    assert!(text.ends_with('\n'), "the text ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name), "{line}");
            assert!(helped.insert(name.to_string()), "HELP twice for {name}");
            current = Some(name.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(
                current.as_deref(),
                Some(name),
                "TYPE right after HELP: {line}"
            );
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert!(
                p.types.insert(name.into(), kind.into()).is_none(),
                "TYPE twice: {name}"
            );
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        sample(&mut p, current.as_deref(), line);
    }
    p
}

/// A metric or label name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_alphabetic() || b == b'_' || b == b':' || (i > 0 && b.is_ascii_digit())
        })
}

/// A sample line of the family `current`, into `p.samples`.
fn sample(p: &mut Parsed, current: Option<&str>, line: &str) {
    let (series, value) = line.rsplit_once(' ').unwrap();
    let name = series.split('{').next().unwrap();
    assert_eq!(current, Some(name), "sample of another family: {line}");
    if p.types[name] == "counter" {
        assert!(name.ends_with("_total"), "counters end in _total: {name}");
    }
    if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
        let inner = labels
            .strip_prefix('{')
            .and_then(|l| l.strip_suffix('}'))
            .unwrap();
        check_labels(inner, line);
    }
    let v: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
    assert!(
        p.samples.insert(series.to_string(), v).is_none(),
        "duplicate {series}"
    );
}

/// `k="v",...`: valid names, quoted values with only the three escapes.
fn check_labels(inner: &str, line: &str) {
    let mut chars = inner.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert!(valid_name(&key) && !key.starts_with("__"), "{line}");
        assert_eq!(chars.next(), Some('"'), "{line}");
        loop {
            match chars.next() {
                Some('\\') => assert!(
                    matches!(chars.next(), Some('\\' | '"' | 'n')),
                    "bad escape: {line}"
                ),
                Some('"') => break,
                Some('\n') | None => panic!("unterminated label value: {line}"),
                Some(_) => {}
            }
        }
        match chars.next() {
            Some(',') | None => {}
            other => panic!("{other:?} after a label value: {line}"),
        }
    }
}

fn render_text(src: &Sources) -> String {
    let mut out = Vec::new();
    Scraper::new(src.clone()).render(&mut out);
    String::from_utf8(out).unwrap()
}

fn sources(fx: &SysfsFixture, data: &TempDir) -> Sources {
    Sources {
        sys: fx.root().clone(),
        data_dirs: vec![data.path().to_path_buf()],
    }
}

#[test]
fn ports_state_rate_and_counters_in_base_units() {
    let fx = SysfsFixture::all().unwrap();
    let data = TempDir::new("metrics");
    counters(&fx, 1000, 7);
    let p = parse(&render_text(&sources(&fx, &data)));
    let s = |k: &str| {
        p.samples
            .get(k)
            .copied()
            .unwrap_or_else(|| panic!("{k}: {:#?}", p.samples))
    };
    let pf = r#"{device="mlx5_0",port="1"}"#;
    assert_eq!(s(&format!("rdma_port_transmit_bytes_total{pf}")), 4000.0);
    assert_eq!(s(&format!("rdma_port_receive_bytes_total{pf}")), 2000.0);
    assert_eq!(s(&format!("rdma_port_transmit_packets_total{pf}")), 15.0);
    assert_eq!(s(&format!("rdma_port_state{pf}")), 4.0);
    assert_eq!(s(&format!("rdma_port_phys_state{pf}")), 5.0);
    assert_eq!(s(&format!("rdma_port_rate_bits_per_second{pf}")), 100e9);
    assert_eq!(
        s(r#"rdma_port_counter_total{device="mlx5_0",port="1",counter="symbol_error"}"#),
        3.0
    );
    assert_eq!(
        s(r#"rdma_port_hw_counter_total{device="mlx5_0",port="1",counter="out_of_buffer"}"#),
        7.0
    );
    assert_eq!(
        s(r#"rdma_port_hw_counter_total{device="rxe0",port="1",counter="sent_pkts"}"#),
        21.0
    );
    assert!(
        !p.samples.keys().any(|k| k.contains("lifespan")),
        "lifespan is a setting, not a counter"
    );
    assert!(
        !p.samples
            .keys()
            .any(|k| k.contains(r#"counter="port_xmit_data""#)),
        "the raw word counter is not exported under a second name"
    );
    assert_eq!(
        s(
            r#"rdma_port_info{device="ibp94s0",port="1",link_layer="InfiniBand",state="4: ACTIVE",phys_state="5: LinkUp",rate="100 Gb/sec (4X EDR)",netdev="ibp94s0"}"#
        ),
        1.0
    );
    assert_eq!(s("rdma_ns_exporter_read_errors"), 0.0);
    assert_eq!(s("rdma_ns_records_unreadable"), 0.0);
}

#[test]
fn counters_only_grow_between_scrapes() {
    let fx = SysfsFixture::all().unwrap();
    let data = TempDir::new("metrics");
    let src = sources(&fx, &data);
    counters(&fx, 1000, 7);
    let a = parse(&render_text(&src));
    counters(&fx, 5000, 9);
    let b = parse(&render_text(&src));
    let mut grew = 0;
    for (series, v) in &a.samples {
        let name = series.split('{').next().unwrap();
        if a.types[name] != "counter" {
            continue;
        }
        let after = b.samples[series];
        assert!(after >= *v, "{series}: {v} then {after}");
        grew += usize::from(after > *v);
    }
    assert!(grew >= 6, "the counters written again moved: {grew}");
}

#[test]
fn unreadable_counters_are_counted_not_fatal() {
    let fx = SysfsFixture::all().unwrap();
    let data = TempDir::new("metrics");
    counters(&fx, 1000, 7);
    fx.write_attr(format!("{PF_PORT}/counters/port_xmit_wait"), "N/A")
        .unwrap();
    let p = parse(&render_text(&sources(&fx, &data)));
    assert_eq!(p.samples["rdma_ns_exporter_read_errors"], 1.0);
    assert_eq!(
        p.samples[r#"rdma_port_transmit_bytes_total{device="mlx5_0",port="1"}"#],
        4000.0
    );
}

#[test]
fn attachments_become_info_metrics_with_escaped_labels() {
    let fx = SysfsFixture::all().unwrap();
    let data = TempDir::new("metrics");
    let att: crate::attach::record::Attachment = serde_json::from_value(json!({
        "network":"roce","containerId":"c0ffee","ifname":"net1","mode":"macvlan",
        "phase":"ready","netns":"/run/netns/x","deviceKey":"k",
        "host":{"name":"ens1f0np0","ifindex":4,"mtu":9000,"hwaddr":"0c:42:a1:3b:00:00",
                "wasUp":true,"addresses":[]},
        "child":{"kind":"macvlan","hwaddr":"02:5e:00:00:00:07","summary":"macvlan bridge"},
        "pod":{"namespace":"ml","name":"odd\"name\\with\nbreaks"},
        "gids":[{"ip":"10.59.0.9","ibdev":"mlx5_0","port":1,"index":1,"gidType":"IB/RoCE v1"},
                {"ip":"10.59.0.9","ibdev":"mlx5_0","port":1,"index":7,"gidType":"RoCE v2"}]}))
    .unwrap();
    Store::new(data.path()).save(&att).unwrap();
    std::fs::write(data.path().join("roce/broken:net1.json"), "{").unwrap();
    let text = render_text(&sources(&fx, &data));
    let p = parse(&text);
    let info = r#"rdma_ns_attachment_info{namespace="ml",pod="odd\"name\\with\nbreaks",network="roce",container_id="c0ffee",interface="net1",mode="macvlan",host_device="ens1f0np0",device="mlx5_0",port="1",gid_index="7",phase="ready"}"#;
    assert_eq!(p.samples.get(info), Some(&1.0), "{text}");
    assert_eq!(
        p.samples
            .keys()
            .filter(|k| k.starts_with("rdma_ns_attachment_gid_info{"))
            .count(),
        2
    );
    assert_eq!(p.samples["rdma_ns_records_unreadable"], 1.0);
}

/// A macvlan attachment of container `cid` in network `roce`, in `phase`.
fn record(cid: &str, phase: &str) -> crate::attach::record::Attachment {
    serde_json::from_value(json!({
        "network":"roce","containerId":cid,"ifname":"net1","mode":"macvlan",
        "phase":phase,"netns":"/run/netns/x","deviceKey":format!("child-{cid}"),
        "host":{"name":"ens1f0np0","ifindex":4,"mtu":9000,"hwaddr":"0c:42:a1:3b:00:00",
                "wasUp":true,"addresses":[]},
        "child":{"kind":"macvlan","hwaddr":"02:5e:00:00:00:07","summary":"macvlan bridge"},
        "pod":{"namespace":"ml","name":cid}}))
    .unwrap()
}

/// The attachment info samples as `container_id phase`, in text order.
fn attachment_phases(text: &str) -> Vec<String> {
    parse(text)
        .samples
        .keys()
        .filter(|k| k.starts_with("rdma_ns_attachment_info{"))
        .map(|k| {
            let label = |l: &str| {
                let start = k.find(&format!("{l}=\"")).unwrap() + l.len() + 2;
                k[start..].split('"').next().unwrap().to_string()
            };
            format!("{} {}", label("container_id"), label("phase"))
        })
        .collect()
}

#[test]
fn records_are_read_again_when_one_is_added_appended_to_or_removed_and_only_then() {
    let fx = SysfsFixture::all().unwrap();
    let data = TempDir::new("metrics");
    let store = Store::new(data.path());
    store.save(&record("c1", "adding")).unwrap();
    let mut scraper = Scraper::new(sources(&fx, &data));
    let mut scrape = || {
        let mut out = Vec::new();
        scraper.render(&mut out);
        (
            attachment_phases(&String::from_utf8(out).unwrap()),
            scraper.records.reads,
        )
    };
    assert_eq!(scrape(), (vec!["c1 adding".to_string()], 1));
    assert_eq!(
        scrape(),
        (vec!["c1 adding".to_string()], 1),
        "unchanged: not read"
    );
    store.save(&record("c2", "ready")).unwrap();
    let both = vec!["c1 adding".to_string(), "c2 ready".to_string()];
    assert_eq!(scrape(), (both.clone(), 2), "a record added");
    store.update(&record("c1", "ready")).unwrap();
    let ready = vec!["c1 ready".to_string(), "c2 ready".to_string()];
    assert_eq!(scrape(), (ready.clone(), 3), "a record appended to");
    assert_eq!(scrape(), (ready, 3));
    store.remove("roce", "c2", "net1").unwrap();
    assert_eq!(
        scrape(),
        (vec!["c1 ready".to_string()], 4),
        "a record removed"
    );
    std::fs::remove_dir_all(data.path()).unwrap();
    assert_eq!(scrape(), (vec![], 5), "the data dir removed");
    assert_eq!(scrape(), (vec![], 5));
}

#[test]
fn escaping_is_exactly_backslash_quote_newline() {
    let mut s = Vec::new();
    escape_label_value(&mut s, "a\\b\"c\nd\te é");
    assert_eq!(s, "a\\\\b\\\"c\\nd\te é".as_bytes());
}

#[test]
fn pieces_of_every_length_are_appended_whole() {
    let text = "rdma_port_hw_counter_total{device=\"mlx5_0\",counter=\"é";
    for len in (0..=text.len()).filter(|l| text.is_char_boundary(*l)) {
        let mut out = b"head:".to_vec();
        super::text::push_bytes(&mut out, &text.as_bytes()[..len]);
        assert_eq!(out, format!("head:{}", &text[..len]).as_bytes(), "{len}");
    }
}

/// The ports a scrape hands over, and the counters of each in order.
#[derive(Default)]
struct Seen(
    Vec<crate::kernel::topology::node::PortInfo>,
    Vec<(CounterDir, String)>,
);
impl ScrapeSink for Seen {
    fn port(&mut self, port: &crate::kernel::topology::node::PortInfo) {
        self.0.push(port.clone());
    }
    fn counter(&mut self, dir: CounterDir, name: &str, _: u64) {
        self.1.push((dir, name.to_string()));
    }
    fn unreadable(&mut self, _: CounterDir, name: Option<&str>, why: &str) {
        panic!("{name:?}: {why}");
    }
}

#[test]
fn the_scrape_reader_agrees_with_the_full_topology_reader() {
    let fx = SysfsFixture::all().unwrap();
    counters(&fx, 1000, 7);
    let topo = RdmaSysfs::new(fx.root());
    let mut seen = Seen::default();
    topo.scrape(&mut CounterListings::default(), &mut seen)
        .unwrap();
    let mut pma: Vec<&str> = seen
        .1
        .iter()
        .filter(|(d, _)| *d == CounterDir::Pma)
        .map(|(_, n)| n.as_str())
        .collect();
    pma.sort_unstable();
    assert_eq!(
        pma,
        [
            "link_downed",
            "port_rcv_data",
            "port_rcv_packets",
            "port_xmit_data",
            "port_xmit_packets",
            "symbol_error"
        ],
        "every PMA counter once"
    );
    let brief = seen.0;
    let full: Vec<_> = topo
        .devices()
        .unwrap()
        .into_iter()
        .flat_map(|d| {
            d.ports.into_iter().map(move |p| {
                (
                    d.name.clone(),
                    p.index,
                    p.state,
                    p.phys_state,
                    p.link_layer,
                    p.rate,
                    p.netdevs,
                )
            })
        })
        .collect();
    let brief: Vec<_> = brief
        .into_iter()
        .map(|p| {
            (
                p.ibdev,
                p.port.index,
                p.port.state,
                p.port.phys_state,
                p.port.link_layer,
                p.rate,
                p.netdevs,
            )
        })
        .collect();
    assert_eq!(brief, full);
    assert_eq!(brief.len(), 5);
}

/// The text without the render time, whose value differs from one scrape to the next.
fn without_render_time(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("rdma_ns_exporter_render_seconds "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Scrapes with `scraper`; the text, checked against what a new scraper (no listing kept)
/// renders at the same moment, and the counter directories listed so far.
fn scrape_kept(scraper: &mut Scraper, src: &Sources) -> (String, usize) {
    let mut out = Vec::new();
    scraper.render(&mut out);
    let text = without_render_time(&String::from_utf8(out).unwrap());
    assert_eq!(
        text,
        without_render_time(&render_text(src)),
        "the kept listings give what a new listing gives"
    );
    (text, scraper.listings.listed())
}

/// Copies the tree at `from` to `to`: every directory a new one, as a device registered
/// again gets from kernfs.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&src, &dst);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// The fixture node with its counters written, its sources, and a scraper for it, which keeps
/// the listings from one scrape to the next.
fn node_and_scraper() -> (SysfsFixture, TempDir, Sources, Scraper) {
    let fx = SysfsFixture::all().unwrap();
    let data = TempDir::new("metrics");
    let src = sources(&fx, &data);
    counters(&fx, 1000, 7);
    let scraper = Scraper::new(src.clone());
    (fx, data, src, scraper)
}

#[test]
fn a_counter_directory_is_listed_once_while_it_lives() {
    let (fx, _data, src, mut scraper) = node_and_scraper();
    // PF_PORT's counters and hw_counters, RXE_PORT's hw_counters.
    let (first, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!(listed, 3, "the first scrape lists every counter directory");
    let (again, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!((again, listed), (first.clone(), 3), "nothing listed again");
    counters(&fx, 5000, 9);
    let (moved, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!(
        listed, 3,
        "new values, the same directories: nothing listed again"
    );
    assert_ne!(moved, first, "the values are read at every scrape");
    let hw = r#"rdma_port_hw_counter_total{device="mlx5_0",port="1",counter="out_of_buffer"} 9"#;
    assert!(moved.contains(hw), "{moved}");
}

#[test]
fn a_device_made_again_with_other_counters_is_listed_again() {
    let (fx, _data, src, mut scraper) = node_and_scraper();
    let (before, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!(listed, 3);
    let dev = fx.path().join(PF_PORT).join("../..");
    let dev = std::fs::canonicalize(dev).unwrap();
    // The old tree stays (away from the node) until the test ends, so that no new directory
    // can get an inode number of an old one: kernfs never gives one twice, ext4 may.
    let gone = TempDir::new("metrics-gone");
    std::fs::rename(&dev, gone.path().join("mlx5_0")).unwrap();
    copy_tree(&gone.path().join("mlx5_0"), &dev);
    fx.remove(format!("{PF_PORT}/hw_counters/out_of_buffer"))
        .unwrap();
    fx.write_attr(format!("{PF_PORT}/hw_counters/rx_write_requests"), "11")
        .unwrap();
    let (after, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!(
        listed, 5,
        "mlx5_0's two counter directories listed again, rxe0's not"
    );
    let counter = |name: &str| format!(r#"device="mlx5_0",port="1",counter="{name}"}}"#);
    assert!(before.contains(&counter("out_of_buffer")), "{before}");
    assert!(!after.contains(&counter("out_of_buffer")), "{after}");
    assert!(after.contains(&counter("rx_write_requests")), "{after}");
}

#[test]
fn a_counter_gone_from_a_kept_listing_is_left_out_and_listed_again() {
    let (fx, _data, src, mut scraper) = node_and_scraper();
    let (before, _) = scrape_kept(&mut scraper, &src);
    let symbol_error = r#"counter="symbol_error"}"#;
    assert!(before.contains(symbol_error), "{before}");
    fx.remove(format!("{PF_PORT}/counters/symbol_error"))
        .unwrap();
    // The directory is the same one: its listing is used, and the name that is gone
    // (ENOENT) is left out, not counted as a read error.
    let (left_out, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!(listed, 3);
    assert!(!left_out.contains(symbol_error), "{left_out}");
    assert!(
        left_out.contains("rdma_ns_exporter_read_errors 0\n"),
        "{left_out}"
    );
    let (listed_again, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!(
        listed, 4,
        "the directory is listed again at the next scrape"
    );
    assert_eq!(listed_again, left_out);
    let (_, listed) = scrape_kept(&mut scraper, &src);
    assert_eq!(listed, 4, "and then kept again");
}
