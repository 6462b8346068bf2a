//! The suite's last check: once every lane of scenarios has finished
//! (scripts/e2e runs this after them, and again on three nodes), nothing
//! is left by any of them, whoever's it was. Each scenario's own leak
//! check looks only at what is its own, so that scenarios run side by
//! side; this one also sees what nothing attributes any more (a mount
//! whose volume and kubelet record are gone) and loop devices of deleted
//! images.

use std::time::Duration;

use pav_e2e::{Leaks, cluster, wait_no_leaks};

#[tokio::test]
#[ignore = "needs a cluster"]
async fn nothing_is_left_on_any_node() {
    let client = cluster().await;
    wait_no_leaks("any scenario", Duration::from_secs(120), || {
        Leaks::anything(&client)
    })
    .await;
}
