//! `agentctl-sandbox`: the sandbox's entry point alone, installed beside `agentctl`. It links
//! only `agent-sandbox`, so a sandboxed command pays for a small binary's start instead of
//! the whole CLI's. `agentctl __sandbox-exec` does the same when this binary is missing.

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == agent_sandbox::INIT) {
        return ExitCode::from(agent_sandbox::init_main(&args[2..]));
    }
    if args.get(1).is_none_or(|a| a != agent_sandbox::ENTRY) {
        let _ = writeln!(
            std::io::stderr(),
            "error: agentctl-sandbox is the sandbox's entry point, started by agentctl; \
             to run a command sandboxed by hand use `agentctl sandbox -- CMD`"
        );
        return ExitCode::from(2);
    }
    ExitCode::from(agent_sandbox::entry_main(&args[2..]))
}
