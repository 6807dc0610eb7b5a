//! Child processes that die with their parent: `PR_SET_PDEATHSIG(SIGKILL)` arranged
//! between `fork` and `exec` of a [`std::process::Command`].
//!
//! Why: an application workload's programs (`mariadbd`, `db_bench`) run in their own
//! process group under an `app::ChildGuard`, which kills the group when it is dropped. A
//! driveprobe that is SIGKILLed (or crashes without unwinding) drops nothing, and the
//! programs would go on writing to the drive with nobody to stop them. With the parent
//! death signal the kernel sends them SIGKILL when their parent goes.
//!
//! What the kernel does, and what that means for callers:
//!
//! - The signal fires when the *thread* that forked the child exits, not only when the
//!   whole process does (prctl(2)). A child must therefore be spawned on the thread that
//!   owns it for its whole life. The daemon runs a suite on a run thread that ends after
//!   the run; the app runners spawn and drop their `ChildGuard`s on that thread, and the
//!   guard kills the group before the thread can end, so the signal only ever matters when
//!   the whole process dies. (Spawning on a short-lived helper thread and handing the
//!   guard elsewhere would kill the child when the helper ends: do not do that.)
//! - It applies to the direct child only. A child's own children (a shell script's
//!   programs) are not covered, except that they lose their parent and whatever pipe or
//!   socket tied them to it.
//! - The kernel clears it when the child execs a set-user-ID, set-group-ID or
//!   file-capability binary, and when the child changes its effective or filesystem user
//!   or group ID (so a server that switches to another user loses it).
//! - The parent can die between `fork` and the `prctl`: then the signal would never come.
//!   The child compares `getppid()` with the parent's pid recorded before the fork and
//!   exits at once when they differ (it has been reparented).

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Arranges that the child `cmd` starts gets SIGKILL when the thread that spawns it exits
/// (see the module documentation for what that covers). Call it before `spawn`, on the
/// thread that will own the child. It adds a `pre_exec` hook, so `spawn` forks rather
/// than using `posix_spawn`.
pub fn kill_with_parent(cmd: &mut Command) -> &mut Command {
    // Recorded in the parent, before the fork: the pid the child must see as its parent.
    let parent = std::process::id() as libc::pid_t;
    let hook = move || -> std::io::Result<()> {
        // Only async-signal-safe calls from here on: the child of a multi-threaded parent
        // may not allocate or take locks. prctl, getppid and _exit are plain system calls;
        // `last_os_error` reads errno into an `Os` value without allocating.
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes an integer signal number and touches no
        // memory of ours.
        let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: getppid takes nothing and cannot fail.
        let now = unsafe { libc::getppid() };
        if now != parent {
            // The parent died before the prctl: we were reparented, and no signal will
            // ever come. End here, before exec, without running any of the parent's code
            // (atexit handlers, buffered output).
            // SAFETY: _exit ends the process at once; nothing of ours runs afterwards.
            unsafe { libc::_exit(127) };
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec and only makes the
    // async-signal-safe system calls above (no allocation, no locks, no use of state the
    // parent's other threads may have left half-changed), which is what `pre_exec` asks.
    unsafe { cmd.pre_exec(hook) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    #[test]
    fn the_child_dies_when_the_spawning_thread_ends() {
        use std::os::unix::process::ExitStatusExt;
        // The spawning thread ends while the child sleeps: the kernel kills the child.
        let h = std::thread::spawn(|| {
            kill_with_parent(
                Command::new("sleep")
                    .arg("600")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null()),
            )
            .spawn()
            .unwrap()
        });
        let mut child = h.join().unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let status = status.expect("sleep outlived the thread that spawned it");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    }

    #[test]
    fn a_child_of_a_living_thread_runs_to_its_end() {
        let t0 = Instant::now();
        let mut child = kill_with_parent(Command::new("sleep").arg("0.3"))
            .spawn()
            .unwrap();
        let st = child.wait().unwrap();
        assert!(st.success(), "{st}");
        assert!(t0.elapsed() >= Duration::from_millis(300));
    }
}
