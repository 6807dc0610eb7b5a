//! Where the workers run: the CPUs the process may use, split between the workers
//! (`CpuPolicy::Split`, fio's `cpus_allowed_policy=split`).
//!
//! A worker confined to its CPUs keeps its ring's kernel helper threads (io-wq, made by the
//! kernel on the submitting thread's CPUs) there too. On a target whose I/O the kernel
//! punts to io-wq (tmpfs, buffered files) two unconfined workers and their helpers migrate
//! across each other and leave CPUs idle; split, each CPU serves one worker's queue.

use std::sync::atomic::{AtomicUsize, Ordering};

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use super::job::CpuPolicy;

/// The CPUs each of `workers` workers of queue depth `depth` gets (pure). `None`: not
/// confined (the shared policy, one CPU, or one worker with a deeper queue: its I/O
/// punted to kernel helpers may use every CPU at once).
///
/// At depth 1 a worker and its one I/O never run at the same time: the worker submits
/// and sleeps, the kernel does the I/O, the worker wakes. On one CPU that hand-off is a
/// local wake-up; across CPUs it is an inter-processor interrupt and a wake from idle,
/// which on a VM costs tens of microseconds and would be counted as the drive's latency.
/// So a depth-1 worker gets one CPU of its own (round robin), unless the workers outnumber
/// the CPUs.
///
/// Round robin starts at CPU `start` (mod the count), so runs going on at the same time
/// (a daemon with several drives) do not all begin on the first CPU.
pub fn split(
    allowed: &[usize],
    workers: usize,
    depth: u32,
    policy: CpuPolicy,
    start: usize,
) -> Vec<Option<Vec<usize>>> {
    // More workers than CPUs must share CPUs: confined, a worker waiting behind another
    // on its CPU could not move to an idle one, and its slots would sit empty between a
    // completion and the next submission (tests/engine/suites.rs: jesd219's Little's law check,
    // 28.3 in flight of 32 with 4+ workers confined on 2 CPUs).
    if policy == CpuPolicy::Shared
        || allowed.len() <= 1
        || workers > allowed.len()
        || (workers <= 1 && depth > 1)
    {
        return vec![None; workers];
    }
    (0..workers)
        .map(|w| {
            if workers == allowed.len() || depth <= 1 {
                Some(vec![allowed[(start + w) % allowed.len()]])
            } else {
                Some(
                    allowed
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| j % workers == w)
                        .map(|(_, &c)| c)
                        .collect(),
                )
            }
        })
        .collect()
}

/// Where the next run's round robin starts: each run takes the next CPU.
pub fn next_start() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The CPUs this thread may run on now (cgroup cpusets and `taskset` included).
pub fn allowed() -> Vec<usize> {
    match sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// Confines the calling thread to `cpus`. A refusal (seccomp, a cpuset that changed under
/// us) leaves the thread where it was: placement is an optimisation, never a failure.
pub fn confine(cpus: &[usize]) -> bool {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    sched_setaffinity(None, &set).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_deep_worker_or_one_cpu_or_shared_is_never_confined() {
        assert_eq!(split(&[0, 1], 1, 32, CpuPolicy::Split, 0), vec![None]);
        assert_eq!(split(&[3], 4, 1, CpuPolicy::Split, 0), vec![None; 4]);
        assert_eq!(split(&[0, 1], 2, 16, CpuPolicy::Shared, 0), vec![None; 2]);
        assert_eq!(split(&[0, 1], 1, 1, CpuPolicy::Shared, 0), vec![None]);
    }

    #[test]
    fn depth_one_workers_get_one_cpu_each() {
        assert_eq!(
            split(&[4, 6], 1, 1, CpuPolicy::Split, 0),
            vec![Some(vec![4])]
        );
        assert_eq!(
            split(&[0, 1, 2, 3, 4, 5, 6, 7], 3, 1, CpuPolicy::Split, 0),
            vec![Some(vec![0]), Some(vec![1]), Some(vec![2])]
        );
        // The next run starts one CPU further on.
        assert_eq!(
            split(&[4, 6], 2, 1, CpuPolicy::Split, 1),
            vec![Some(vec![6]), Some(vec![4])]
        );
    }

    #[test]
    fn as_many_workers_as_cpus_get_one_each_and_more_share_them_all() {
        assert_eq!(
            split(&[0, 1], 2, 16, CpuPolicy::Split, 0),
            vec![Some(vec![0]), Some(vec![1])]
        );
        assert_eq!(
            split(&[2, 5, 7], 3, 16, CpuPolicy::Split, 1),
            vec![Some(vec![5]), Some(vec![7]), Some(vec![2])]
        );
        // More workers than CPUs share them all.
        assert_eq!(
            split(&[2, 5, 7], 16, 16, CpuPolicy::Split, 0),
            vec![None; 16]
        );
    }

    #[test]
    fn fewer_workers_than_cpus_get_disjoint_shares_covering_all() {
        let s = split(&[0, 1, 2, 3, 4, 5, 6, 7], 3, 8, CpuPolicy::Split, 0);
        let mut all: Vec<usize> = s.iter().flat_map(|c| c.clone().unwrap()).collect();
        assert_eq!(s[0], Some(vec![0, 3, 6]));
        assert_eq!(s[1], Some(vec![1, 4, 7]));
        assert_eq!(s[2], Some(vec![2, 5]));
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn this_thread_has_cpus_and_can_be_confined_to_them() {
        let cpus = allowed();
        assert!(!cpus.is_empty());
        // Confine a scratch thread (not the test runner's) to its first allowed CPU.
        let first = cpus[0];
        let after = std::thread::spawn(move || {
            assert!(confine(&[first]));
            allowed()
        })
        .join()
        .unwrap();
        assert_eq!(after, vec![first]);
    }
}
