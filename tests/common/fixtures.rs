//! Builders for the status every surface renders (metrics goldens, the HTTP API, the
//! status page): the canaries of a healthy drive, with the figures the tests hold them to
//! passed in and the rest the same everywhere; and the drives they describe.

use driveprobe::health::model::{Identity, Transport};
use driveprobe::status::{CpuWait, OpStatus, ProbeState, ProbeStatus, WindowQuantiles};

/// A 4 KiB read canary at 50 IOPS over a 60 s window, running, on a quiet host: its reads
/// and the CPU wait it has had in all (`cpu_seconds`).
pub fn read_canary(read: OpStatus, cpu_seconds: f64) -> ProbeStatus {
    ProbeStatus {
        writes: false,
        window_seconds: 60.0,
        rate_iops: Some(50.0),
        state: ProbeState::Running,
        read,
        write: OpStatus::default(),
        cpu_wait: CpuWait {
            seconds_total: cpu_seconds,
            window_max_ratio: Some(0.002),
            p99_wait_seconds: Some(20e-6),
            p99_latency_seconds: Some(95e-6),
        },
        host_stall: Some(WindowQuantiles {
            ops: 3_000,
            quantiles: [62e-6, 85e-6, 240e-6, 1.1e-3],
            max: 2.5e-3,
        }),
    }
}

/// A 4 KiB write-and-verify canary at 50 IOPS over a 60 s window, in `state`, on a host
/// whose CPUs are busy (41% of the window waiting at most); no host stall figures.
pub fn verify_canary(
    state: ProbeState,
    read: OpStatus,
    write: OpStatus,
    cpu_seconds: f64,
) -> ProbeStatus {
    ProbeStatus {
        writes: true,
        window_seconds: 60.0,
        rate_iops: Some(50.0),
        state,
        read,
        write,
        cpu_wait: CpuWait {
            seconds_total: cpu_seconds,
            window_max_ratio: Some(0.41),
            p99_wait_seconds: Some(50e-6),
            p99_latency_seconds: Some(90e-6),
        },
        host_stall: None,
    }
}

/// A 400 GB SAS SSD (HGST Ultrastar), the drive the status page's and the report's tests
/// describe.
pub fn sas_ssd() -> Identity {
    Identity {
        model: Some("HGST HUSMM1640ASS200".into()),
        serial: Some("0QV1K5XA".into()),
        firmware: Some("A204".into()),
        wwn: Some("0x5000cca04e1a2b3c".into()),
        transport: Transport::Sas,
        capacity_bytes: Some(400_088_457_216),
        logical_block_size: Some(512),
        rotation_rpm: Some(0),
    }
}
