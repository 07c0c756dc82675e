//! Host software that writes anything anywhere: random scripts of host actions
//! (`host_script`) under DMA traffic. The simulator must never panic, must come to rest,
//! and must repeat itself exactly from the same script.

use super::host_script;
use proptest::prelude::*;

/// An action of the script, as 8 bytes: the kind, then its arguments.
fn action() -> impl Strategy<Value = [u8; 8]> {
    (0u8..12, any::<[u8; 7]>()).prop_map(|(k, a)| {
        let mut b = [k; 8];
        b[1..].copy_from_slice(&a);
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Whatever host software does, the simulator does not panic, comes to rest within
    /// 20 ms of simulated time after the last action, and the same script gives the same
    /// trace.
    #[test]
    fn random_host_actions_never_break_the_simulator(
        pick in any::<u8>(),
        actions in prop::collection::vec(action(), 1..64),
    ) {
        let mut script = vec![pick];
        script.extend(actions.iter().flatten());
        let a = host_script::run(&script);
        prop_assert_eq!(a.1, 0, "events still pending 20 ms after the last action");
        prop_assert_eq!(a, host_script::run(&script));
    }
}
