//! The attachment record as the CNI reads it: the record of records/attachment.rs with its
//! mode's state as the modes' closed enum ([`ModeState`]), and what only an ADD knows how to
//! make (a new record from a request). The format itself, and everything a reader that acts on
//! no mode needs, lives in `records`.

use std::any::Any;

pub use crate::records::attachment::{
    ChildKind, ChildRecord, GidRecord, GidView, HostDevice, HostSide, IpoibRecord, ModeRecord,
    ModeWire, NetnsId, PermChange, Phase, PodInterface, PodRef, RdmaRecord, RecordMismatch,
    RecordWire, RecordedMode, SoftRoceRecord, StepRecords, Unreadable, SCHEMA, SOFT_ROCE_STEP,
};

use crate::attach::modes::{Mode, ModeState};

/// An attachment record whose mode state is the CNI's modes'.
pub type Attachment = crate::records::attachment::Attachment<ModeState>;

impl RecordedMode for ModeState {
    fn name(&self) -> &str {
        self.mode().as_str()
    }

    fn from_wire(mode: &str, wire: ModeWire) -> Result<ModeState, RecordMismatch> {
        let mode = Mode::parse(Some(mode)).map_err(|_| RecordMismatch::UnknownMode {
            mode: mode.to_string(),
            known: Mode::ALL
                .iter()
                .map(|m| format!("`{}`", m.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        mode.state_from_wire(wire)
    }

    fn record(&self) -> &dyn ModeRecord {
        ModeState::record(self)
    }

    fn record_mut(&mut self) -> &mut dyn ModeRecord {
        ModeState::record_mut(self)
    }
}

/// The pod of `args` (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_UID`), when it names one.
pub fn pod_of(args: &crate::cni::args::CniArgs) -> Option<PodRef> {
    let get = |k| args.get(k).filter(|v| !v.is_empty()).map(str::to_string);
    let pod = PodRef {
        namespace: get("K8S_POD_NAMESPACE"),
        name: get("K8S_POD_NAME"),
        uid: get("K8S_POD_UID"),
    };
    (pod.namespace.is_some() || pod.name.is_some() || pod.uid.is_some()).then_some(pod)
}

impl Attachment {
    /// A new attachment in phase `Adding`: who asked (network, container, interface), the pod
    /// netns, the device plugin's ID as given, and what the mode holds; nothing applied or found
    /// yet.
    pub fn adding(
        req: &crate::cni::Request,
        netns: &crate::kernel::Netns,
        device_key: String,
        mode_state: ModeState,
        device_id: Option<String>,
    ) -> Attachment {
        Attachment {
            schema: SCHEMA,
            written_by: Some(env!("CARGO_PKG_VERSION").to_string()),
            network: req.conf.name.clone(),
            container_id: req.env.container_id.clone(),
            ifname: req.env.ifname.clone(),
            pod: pod_of(&req.env.args),
            phase: Phase::Adding,
            netns: netns.path().display().to_string(),
            netns_id: NetnsId::of(netns),
            device_key,
            mode_state,
            perm_changes: Vec::new(),
            device_info_file: None,
            // Parsed without error before any mode gets here.
            conf: serde_json::from_slice(&req.stdin).ok(),
            cni_path: req
                .env
                .path
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            device_id,
            steps: StepRecords::default(),
        }
    }

    /// The conf's mode when ADD ran: picks the driver that releases the attachment.
    pub fn mode(&self) -> Mode {
        self.mode_state.mode()
    }

    /// The mode's state, as the type `T` its mode records (None for another mode's).
    pub fn state<T: Any>(&self) -> Option<&T> {
        self.mode_state.as_any().downcast_ref()
    }

    pub fn state_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.mode_state.as_any_mut().downcast_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::gids::GidView;
    use crate::attach::modes::chained::ChainedState;
    use crate::attach::modes::child::{ChildKind, ChildState};
    use crate::attach::modes::move_dev::MoveState;
    use crate::attach::store::Store;
    use crate::testutil::TempDir;
    use serde::Deserialize;
    use std::fs;
    use std::path::{Path, PathBuf};

    /// A record under testdata/: `set` is `records-0.1.0` or `records-schema-2`.
    fn frozen(set: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/attach/testdata")
            .join(set)
    }

    /// The record of `container`:net1 of `network` in the store at `dir`.
    fn load(dir: &Path, network: &str, container: &str) -> Attachment {
        Store::new(dir)
            .load(network, container, "net1")
            .unwrap_or_else(|e| panic!("{network}/{container}: {e}"))
            .unwrap_or_else(|| panic!("{network}/{container}: no record"))
    }

    /// A child's parent (name, ifindex) and its pod interface (ifindex, MTU).
    fn assert_child(
        state: &ChildState,
        parent: (&str, u32),
        pod: (Option<u32>, Option<u32>),
        case: &str,
    ) {
        assert_eq!(
            (state.parent.name.as_str(), state.parent.ifindex),
            parent,
            "{case}"
        );
        let p = &state.pod_interface;
        assert_eq!((p.ifindex, p.mtu), pod, "{case}");
    }

    /// The compatibility promise of CHANGELOG.md: records written by 0.1.0 (frozen copies under
    /// testdata/records-0.1.0, one per mode, as DEL finds them on a node upgraded while pods
    /// run) must load with every field DEL, CHECK and GC use. A renamed or removed field, or a
    /// new one without a default, fails here.
    #[test]
    fn records_written_by_0_1_0_still_load() {
        let dir = frozen("records-0.1.0");
        moved_device_of_0_1_0(&load(&dir, "rdma-move", "c0ffee01"));
        macvlan_child_of_0_1_0(&load(&dir, "roce-shared", "c0ffee02"));
        // One pretty-printed document, as the earliest builds wrote it.
        let ib = load(&dir, "ib-partition", "c0ffee03");
        let state = ib
            .state::<ChildState>()
            .expect("mode ipoib loads as a child");
        let ipoib = state.child.ipoib.expect("ipoib");
        assert_eq!((ipoib.pkey, ipoib.mode), (Some(0x8001), Some(0)));
        assert_eq!(state.parent.name, "ibp94s0");
        assert_eq!(state.pod_interface.ifindex, Some(40));
        // A record without `host.addresses`: absent fields read as their default.
        chained_of_0_1_0(&load(&dir, "sriov-rdma", "c0ffee04"));
    }

    fn moved_device_of_0_1_0(mv: &Attachment) {
        assert_eq!(
            mv.phase,
            Phase::Ready,
            "the ready line, not the intent before it"
        );
        let moved = mv
            .state::<MoveState>()
            .expect("mode move loads as a moved device");
        assert_eq!(
            (
                mv.mode().as_str(),
                moved.host.name.as_str(),
                moved.host.ifindex
            ),
            ("move", "ens1f0v0", 12)
        );
        assert_eq!(moved.host.perm_hwaddr.as_deref(), Some("02:00:00:00:3b:02"));
        assert_eq!(moved.host.pci.as_deref(), Some("0000:3b:00.2"));
        assert_eq!(mv.device_key, "pci-0000:3b:00.2");
        assert_eq!(
            moved.rdma.as_ref().map(|r| (r.ibdev.as_str(), r.index)),
            Some(("mlx5_2", 3))
        );
        assert_eq!(mv.ib_device(), moved.rdma.as_ref());
        let pod = &moved.pod_interface;
        assert_eq!((pod.ifindex, pod.mtu), (Some(12), Some(9000)));
        assert!(pod.ipam_result.is_some());
        assert_eq!(pod.gids.len(), 1);
        assert_eq!(
            (pod.gids[0].index, pod.gids[0].gid_type.as_str()),
            (3, "RoCE v2")
        );
        assert_eq!(pod.gid_view, Some(GidView::Pod));
        assert_eq!(mv.perm_changes.len(), 1);
        assert_eq!(mv.perm_changes[0].rdev, (231, 194));
        assert_eq!(mv.perm_changes[0].old_mode, 0o600);
        assert!(mv.device_info_file.is_some());
    }

    fn macvlan_child_of_0_1_0(mac: &Attachment) {
        assert_eq!(mac.phase, Phase::Ready);
        let state = mac
            .state::<ChildState>()
            .expect("mode macvlan loads as a child");
        assert_eq!(
            (state.child.kind.as_str(), state.child.macvlan_mode),
            ("macvlan", Some(4))
        );
        assert_eq!(state.child.hwaddr.as_deref(), Some("02:5e:00:00:00:07"));
        assert_child(state, ("ens1f0np0", 4), (Some(31), Some(9000)), "0.1.0");
        assert_eq!(mac.gids()[0].index, 5);
        assert_eq!(mac.device_id.as_deref(), Some("0"));
        assert_eq!(state.pod_interface.gid_view, Some(GidView::Host));
        assert_eq!(mac.ib_device(), None);
    }

    fn chained_of_0_1_0(chained: &Attachment) {
        assert_eq!(chained.mode(), Mode::Rdma);
        assert_eq!(
            (chained.schema, chained.netns_id),
            (1, None),
            "unversioned: schema 1"
        );
        let state = chained
            .state::<ChainedState>()
            .expect("mode rdma loads as chained");
        assert_eq!(state.function, "0000:3b:00.3");
        assert_eq!((state.rdma.ibdev.as_str(), state.rdma.index), ("mlx5_3", 4));
        assert_eq!(
            (state.prev_mac.as_deref(), state.prev_mtu),
            (Some("02:00:00:00:3b:03"), Some(1500))
        );
        assert_eq!(chained.pod_interface(), None);
        assert_eq!(chained.device_id.as_deref(), Some("0000:3b:00.3"));
    }

    /// The frozen schema-2 records under testdata/records-schema-2, one directory per case.
    fn schema_2_record(case: &str, file: &str) -> PathBuf {
        frozen("records-schema-2").join(case).join(file)
    }

    /// Every line of a frozen record loads as `mode` and encodes back to its own bytes; the
    /// record (its last line) saved through the store is that line again. Returns the record.
    fn round_trip(store: &Store, case: &str, file: &str, mode: Mode) -> Attachment {
        let path = schema_2_record(case, file);
        let text = fs::read(&path).unwrap_or_else(|e| panic!("{case}: {e}"));
        let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
        assert!(lines.len() >= 2, "{case}: intent and ready lines");
        for line in &lines {
            let att: Attachment =
                serde_json::from_slice(line).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(att.schema, SCHEMA, "{case}");
            assert_eq!(att.mode(), mode, "{case}: {:?}", att.mode_state);
            assert_eq!(
                String::from_utf8(att.record_line().unwrap()).unwrap(),
                String::from_utf8(line.to_vec()).unwrap(),
                "{case}: a line encodes back to itself"
            );
        }
        let att = Attachment::from_record_file(&text).unwrap();
        assert_eq!(att.phase, Phase::Ready, "{case}: the last line counts");
        store.save(&att).unwrap();
        let saved = fs::read(
            store
                .dir()
                .join(&att.network)
                .join(format!("{}:{}.json", att.container_id, att.ifname)),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(saved).unwrap(),
            String::from_utf8(lines.last().unwrap().to_vec()).unwrap(),
            "{case}: saving the loaded record writes it back unchanged"
        );
        store
            .remove(&att.network, &att.container_id, &att.ifname)
            .unwrap();
        att
    }

    /// The on-disk format may not drift: records of every mode as ADD wrote them before the
    /// typed form (frozen under testdata/records-schema-2: intent, update and ready lines) load
    /// as their mode's state with their contents, and every line encodes back to the same
    /// bytes, so older binaries read what this one writes.
    #[test]
    fn records_of_schema_2_load_as_their_mode_and_save_byte_for_byte() {
        let tmp = TempDir::new("state-schema-2");
        let store = Store::new(tmp.path());
        let trip = |case, file, mode| round_trip(&store, case, file, mode);
        moved_device_of_schema_2(&trip("move", "c0ffee:net1.json", Mode::Move));
        moved_ib_device_of_schema_2(&trip("move-exclusive-ib", "c9:net1.json", Mode::Move));
        children_of_schema_2(
            &trip("macvlan", "c1:net1.json", Mode::Macvlan),
            &trip("ipoib", "c1:net1.json", Mode::Ipoib),
        );
        chained_of_schema_2(&trip("chained-rdma", "c9:net1.json", Mode::Rdma));
    }

    fn moved_device_of_schema_2(att: &Attachment) {
        let mv = att.state::<MoveState>().expect("a moved device");
        assert_eq!(
            (mv.host.name.as_str(), mv.host.ifindex, mv.host.mtu),
            ("ens1f0v0", 7, 1500)
        );
        assert_eq!(mv.host.addresses, vec!["192.0.2.7/24".to_string()]);
        assert_eq!(mv.rdma, None);
        assert_eq!(
            (mv.pod_interface.ifindex, mv.pod_interface.mtu),
            (Some(7), Some(9000))
        );
        assert!(mv.pod_interface.ipam_result.is_some());
    }

    fn moved_ib_device_of_schema_2(att: &Attachment) {
        let ib = att.state::<MoveState>().expect("a moved device");
        assert_eq!(
            ib.rdma
                .as_ref()
                .map(|r| (r.ibdev.as_str(), r.index, r.infiniband)),
            Some(("mlx5_0", 3, false))
        );
        assert_eq!(ib.pod_interface.gid_view, Some(GidView::Pod));
        assert!(ib.pod_interface.gids.is_empty());
    }

    fn children_of_schema_2(macvlan: &Attachment, ipoib: &Attachment) {
        let mac = macvlan.state::<ChildState>().expect("a child");
        assert_eq!(
            (mac.child.kind.as_str(), mac.child.hwaddr.as_deref()),
            ("macvlan", Some("42:75:18:bf:af:c2"))
        );
        assert_child(mac, ("ens1f0np0", 4), (Some(5), Some(1500)), "macvlan");
        assert_eq!(mac.pod_interface.gids[0].index, 6);
        assert_eq!(mac.pod_interface.gid_view, Some(GidView::Host));

        let ib = ipoib.state::<ChildState>().expect("a child");
        assert_eq!(ib.child.kind, ChildKind::Ipoib);
        assert!(ib.child.ipoib.is_some());
        assert_child(ib, ("ib0", 5), (Some(6), Some(65520)), "ipoib");
    }

    fn chained_of_schema_2(chained: &Attachment) {
        let state = chained
            .state::<ChainedState>()
            .expect("a chained ib device");
        assert_eq!(state.function, "0000:3b:00.2");
        assert_eq!((state.rdma.ibdev.as_str(), state.rdma.index), ("mlx5_2", 9));
        assert_eq!(
            (state.prev_mac.as_deref(), state.prev_mtu),
            (Some("02:00:00:00:00:0a"), None),
            "prevResult gave a MAC and no MTU"
        );
        assert_eq!(chained.pod_interface(), None);
        assert!(chained.device_info_file.is_some());
        assert_eq!(chained.pci_function(), Some("0000:3b:00.2"));
    }
    /// The first line of a frozen schema-2 record, as JSON.
    fn frozen_line(case: &str, file: &str) -> serde_json::Value {
        let text = fs::read_to_string(schema_2_record(case, file)).unwrap();
        serde_json::from_str(text.lines().next().unwrap()).unwrap()
    }

    /// What a mode or a step newer than the flat layout records goes under keys of its own: a
    /// mode's own fields reach its decoder in `ModeWire::own` and are written back where the
    /// mode's fields stand (before `permChanges`); a step's record round-trips under `steps`,
    /// which is left out when empty (the frozen records above hold none); and a mode that never
    /// wrote a field drops it, as older releases do.
    #[test]
    fn newer_modes_and_steps_record_under_keys_of_their_own() {
        let mut doc = frozen_line("macvlan", "c1:net1.json");
        doc["dummyLink"] = serde_json::json!({"ifindex": 9});
        doc["dummyPeer"] = serde_json::json!("not a link");
        let wire: RecordWire = serde_json::from_value(doc.clone()).unwrap();
        #[derive(Debug, PartialEq, Deserialize)]
        struct DummyLink {
            ifindex: u32,
        }
        let own = |key| wire.mode_fields.own_field::<DummyLink>("dummy", key);
        assert_eq!(own("dummyLink").unwrap(), Some(DummyLink { ifindex: 9 }));
        assert_eq!(own("rail").unwrap(), None);
        let e = own("dummyPeer").unwrap_err().to_string();
        assert!(
            e.contains("mode \"dummy\"") && e.contains("`dummyPeer`"),
            "{e}"
        );
        let text = serde_json::to_string(&wire).unwrap();
        let own = text.find("\"dummyLink\"").unwrap();
        assert!(own > text.find("\"child\"").unwrap(), "{text}");
        assert!(
            own < text.find("\"permChanges\"").unwrap_or(text.len()),
            "{text}"
        );

        let mut att: Attachment = serde_json::from_value(doc).unwrap();
        let line = String::from_utf8(att.record_line().unwrap()).unwrap();
        assert!(
            !line.contains("dummyLink"),
            "mode macvlan never wrote it: {line}"
        );
        assert!(
            att.steps.is_empty() && !line.contains("\"steps\""),
            "{line}"
        );

        let rxe = serde_json::json!({"ibdev": "rxe0", "index": 4});
        att.steps.set("softRoce", &rxe).unwrap();
        let line = att.record_line().unwrap();
        let written: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(written["steps"], serde_json::json!({ "softRoce": rxe }));
        let back = Attachment::from_record_file(&line).unwrap();
        assert_eq!(back, att);
        let got: Option<serde_json::Value> = back.steps.get("softRoce").unwrap();
        assert_eq!(got, Some(rxe));
        assert_eq!(back.steps.get::<serde_json::Value>("rail").unwrap(), None);
    }

    /// A record whose mode and fields disagree names DEL nothing to release: it is refused,
    /// naming the file, the mode and the missing field, also when an intact intent line precedes
    /// it (that is no torn tail), and listed as unreadable, which keeps what it may hold (device
    /// permissions stay while any record is unreadable).
    #[test]
    fn a_record_whose_mode_lacks_its_fields_is_refused_naming_the_field() {
        let tmp = TempDir::new("state-mismatch");
        let store = Store::new(tmp.path());
        store.ensure_dir(Some("n")).unwrap();
        let path = tmp.path().join("n/c1:net1.json");
        let frozen = |case: &str, file: &str| -> Vec<serde_json::Value> {
            fs::read_to_string(schema_2_record(case, file))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        // The case, its frozen file, its mode, and the field taken out of its last line.
        let cases = [
            ("macvlan", "c1:net1.json", "macvlan", "child"),
            ("chained-rdma", "c9:net1.json", "rdma", "rdma"),
            ("chained-rdma", "c9:net1.json", "rdma", "host.pci"),
        ];
        for (case, file, mode, field) in cases {
            let lines = frozen(case, file);
            let (intent, mut last) = (lines[0].clone(), lines.last().unwrap().clone());
            let (outer, inner) = field.split_once('.').unwrap_or(("", field));
            let holder = if outer.is_empty() {
                &mut last
            } else {
                &mut last[outer]
            };
            assert!(holder.as_object_mut().unwrap().remove(inner).is_some());
            let field = &format!("`{field}`");
            let text = format!("{intent}\n{last}\n");
            fs::write(&path, text).unwrap();
            let err = store.load("n", "c1", "net1").unwrap_err();
            let msg = err.to_string();
            assert_eq!(err.code(), 106, "{msg}");
            for part in ["c1:net1.json", &format!("mode \"{mode}\""), field.as_str()] {
                assert!(msg.contains(part), "{case}: {part} missing from: {msg}");
            }
            let (held, unreadable) = store.list_all();
            assert_eq!((held.len(), unreadable.len()), (0, 1), "{case}");
            let direct = serde_json::from_value::<Attachment>(last).unwrap_err();
            assert!(direct.to_string().contains(field), "{direct}");
        }
        // The mode is read from the child's kind: a record where they disagree is refused too.
        let lines = frozen("macvlan", "c1:net1.json");
        let (intent, mut last) = (lines[0].clone(), lines.last().unwrap().clone());
        last["child"]["kind"] = "ipoib".into();
        fs::write(&path, format!("{intent}\n{last}\n")).unwrap();
        let err = store.load("n", "c1", "net1").unwrap_err();
        assert_eq!(err.code(), 106, "{err}");
        assert!(
            err.to_string()
                .contains(r#"a mode "macvlan" record holds a child of kind "ipoib""#),
            "{err}"
        );
        last["mode"] = "ipoib".into();
        fs::write(&path, format!("{intent}\n{last}\n")).unwrap();
        let att = store.load("n", "c1", "net1").unwrap().unwrap();
        assert_eq!(att.mode(), Mode::Ipoib);
    }
}
