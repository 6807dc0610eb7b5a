#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    driveprobe::cli::main()
}
