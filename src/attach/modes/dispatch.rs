//! What the mode list (`modes!` in mod.rs) makes of its entries: the [`Mode`] names, the
//! [`ModeConf`] settings and the [`ModeState`] records as closed enums with one variant per
//! mode, and their dispatch to each mode's [`ModeDriver`](super::ModeDriver). Nothing here names
//! a mode, so nothing here changes when one is added.

/// `modes! { $(#[doc] Variant => driver::Type,)+ }`: see the module doc.
macro_rules! modes {
    ($($(#[$doc:meta])* $mode:ident => $driver:ty,)+) => {
        /// Which mode, without its settings: what the conf's `mode` names, and what records and
        /// messages call it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Mode {
            $($(#[$doc])* $mode,)+
        }

        impl Mode {
            /// Every mode, in the order of the list.
            pub const ALL: &'static [Mode] = &[$(Mode::$mode,)+];

            /// Their names, in the same order.
            const NAMES: &'static [&'static str] = &[$(<$driver as ModeDriver>::NAME,)+];

            /// The mode `M` drives.
            pub fn of<M: ModeDriver>() -> Mode {
                Mode::from_name(M::NAME).expect("every driver is in the mode list")
            }

            /// The name the conf and the records use.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Mode::$mode => <$driver as ModeDriver>::NAME,)+
                }
            }

            /// See [`ModeDriver::LOCKS_DEVICE`].
            pub fn locks_device(self) -> bool {
                match self {
                    $(Mode::$mode => <$driver as ModeDriver>::LOCKS_DEVICE,)+
                }
            }

            /// See [`ModeDriver::STEPS`].
            pub fn steps(self) -> &'static [&'static dyn Step] {
                match self {
                    $(Mode::$mode => <$driver as ModeDriver>::STEPS,)+
                }
            }

            /// See [`ModeDriver::netns_mode_needed`].
            pub fn netns_mode_needed(self, rdma: RdmaConf) -> Option<NetnsMode> {
                match self {
                    $(Mode::$mode => <$driver as ModeDriver>::netns_mode_needed(rdma),)+
                }
            }

            /// This mode's settings from `conf` (see [`ModeDriver::settings`]).
            pub fn settings(self, conf: &NetConf, rdma: RdmaConf) -> Result<ModeConf> {
                match self {
                    $(Mode::$mode => {
                        <$driver as ModeDriver>::settings(conf, rdma).map(ModeConf::$mode)
                    })+
                }
            }

            /// This mode's state from its fields of a record.
            pub fn state_from_wire(
                self,
                wire: ModeWire,
            ) -> std::result::Result<ModeState, RecordMismatch> {
                match self {
                    $(Mode::$mode => {
                        <$driver as ModeDriver>::state_from_wire(wire).map(ModeState::$mode)
                    })+
                }
            }
        }

        /// The mode with the settings only it reads.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum ModeConf {
            $($mode(<$driver as ModeDriver>::Settings),)+
        }

        impl ModeConf {
            pub fn kind(&self) -> Mode {
                match self {
                    $(ModeConf::$mode(_) => Mode::$mode,)+
                }
            }

            /// ADD with these settings (see [`add`]).
            pub fn add(&self, ctx: &Ctx<'_>, req: &Request, pc: &PluginConf) -> Result<CniResult> {
                match self {
                    $(ModeConf::$mode(settings) => add::<$driver>(ctx, req, pc, settings),)+
                }
            }
        }

        /// What one mode attached: its part of the record.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum ModeState {
            $($mode(<$driver as ModeDriver>::State),)+
        }

        impl ModeState {
            /// Mode `M`'s state as a record's.
            pub fn of<M: ModeDriver>(state: M::State) -> ModeState {
                let state: Box<dyn std::any::Any> = Box::new(state);
                match Mode::of::<M>() {
                    $(Mode::$mode => ModeState::$mode(
                        *state.downcast().expect("a mode's state is its driver's State type"),
                    ),)+
                }
            }

            /// The mode that records this state.
            pub fn mode(&self) -> Mode {
                match self {
                    $(ModeState::$mode(_) => Mode::$mode,)+
                }
            }

            pub fn record(&self) -> &dyn ModeRecord {
                match self {
                    $(ModeState::$mode(state) => state,)+
                }
            }

            pub fn record_mut(&mut self) -> &mut dyn ModeRecord {
                match self {
                    $(ModeState::$mode(state) => state,)+
                }
            }

            pub fn as_any(&self) -> &dyn std::any::Any {
                match self {
                    $(ModeState::$mode(state) => state,)+
                }
            }

            pub fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
                match self {
                    $(ModeState::$mode(state) => state,)+
                }
            }

            /// CHECK of `subject` (whose state this is) by its mode: the pod interface it checked.
            pub fn check(&self, ctx: &Ctx<'_>, subject: &CheckSubject<'_>) -> Result<Option<Link>> {
                match self {
                    $(ModeState::$mode(state) => {
                        <$driver as ModeDriver>::check(ctx, subject, state)
                    })+
                }
            }

            /// Takes back the kernel side of `att` (whose state this is), by its mode.
            pub fn release(
                &self,
                ctx: &Ctx<'_>,
                netns: Option<&Path>,
                att: &Attachment,
            ) -> Result<()> {
                match self {
                    $(ModeState::$mode(state) => {
                        <$driver as ModeDriver>::release(ctx, &Release { att, state, netns })
                    })+
                }
            }
        }
    };
}
