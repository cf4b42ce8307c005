//! The packaging files: the systemd unit passes `systemd-analyze verify` (when this
//! machine has it) and carries its hardening; the Dockerfile is linted (this machine has
//! no Docker daemon, and its base images could not be pulled here): two stages, the
//! binary copied from the build stage, an unprivileged user, the ports, a node
//! configuration the node itself accepts, and a HEALTHCHECK that works against it.

mod common;

use common::*;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/tickwire-node.service")).unwrap();
    for key in [
        "User=tickwire",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=\n",
        // A backbone channel with interface=... lists interfaces over netlink.
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK\n",
        "SystemCallFilter=@system-service",
        "StateDirectory=tickwire",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(key), "{key:?} missing from the unit");
    }
    let Ok(probe) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze is not installed here: the unit's text was checked only");
        return;
    };
    assert!(probe.status.success());
    // Verified as installed, with the binary where the unit says it is.
    let dir = std::env::temp_dir().join(format!("tickwire-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tickwire-node.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/tickwire", node_program()),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}

#[test]
fn the_dockerfile_builds_in_two_stages_and_runs_unprivileged_with_a_valid_config() {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    // Instructions, continuation lines joined, comments dropped.
    let joined = text.replace("\\\n", " ");
    let instr: Vec<(String, String)> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            (k.to_uppercase(), v.trim().to_string())
        })
        .collect();
    let known = [
        "FROM",
        "WORKDIR",
        "COPY",
        "RUN",
        "USER",
        "VOLUME",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "ENV",
        "ARG",
        "LABEL",
        "HEALTHCHECK",
    ];
    // (No ADD: it fetches and unpacks; COPY only.)
    for (k, v) in &instr {
        assert!(
            known.contains(&k.as_str()),
            "instruction {k} {v} is not one this file uses"
        );
    }
    let froms: Vec<&String> = instr
        .iter()
        .filter(|(k, _)| k == "FROM")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(froms.len(), 2, "a build stage and a run stage: {froms:?}");
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    let run_stage = instr
        .iter()
        .skip_while(|(k, v)| !(k == "FROM" && v == froms[1]))
        .collect::<Vec<_>>();
    let has =
        |k: &str, pred: &dyn Fn(&str) -> bool| run_stage.iter().any(|(kk, v)| kk == k && pred(v));
    assert!(has("COPY", &|v| v.starts_with("--from=build ")
        && v.ends_with(" /usr/local/bin/tickwire")));
    assert!(
        has("USER", &|v| v != "root" && v != "0"),
        "runs as an unprivileged user"
    );
    assert!(has("EXPOSE", &|v| v.contains("14002") && v.contains("15000")));
    assert!(has("CMD", &|v| v.contains("--config")
        && v.contains("/etc/tickwire/node.toml")));
    // Every file it copies exists, and the node takes the configuration it ships.
    for (k, v) in &instr {
        if k == "COPY" && !v.starts_with("--from") {
            let src = v.split_whitespace().next().unwrap();
            assert!(
                repo().join(src).exists() || src == ".",
                "COPY {src}: missing"
            );
        }
    }
    let cfg = repo().join("deploy/docker/node.toml");
    let out = run(
        &["node", "--config", cfg.to_str().unwrap(), "--print-config"],
        std::time::Duration::from_secs(20),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("listen = \"0.0.0.0:14002\""),
        "{}",
        out.stdout
    );

    // The HEALTHCHECK's own command, run against a node with the image's configuration
    // (on free loopback ports instead of the image's): it exits 0.
    let check = run_stage
        .iter()
        .find(|(k, _)| k == "HEALTHCHECK")
        .map(|(_, v)| v.clone())
        .expect("a HEALTHCHECK");
    let argv: Vec<String> = serde_json::from_str(
        check
            .split_once(" CMD ")
            .map(|(_, cmd)| cmd.trim())
            .expect("HEALTHCHECK ... CMD [...]"),
    )
    .expect("the exec form");
    assert_eq!(argv[0], "/usr/local/bin/tickwire");
    let image_cfg = std::fs::read_to_string(&cfg).unwrap();
    let ws_port = free_port_for_tests();
    let local_cfg = TempConfig::new(
        "docker-healthcheck",
        &image_cfg
            .replace("0.0.0.0:14002", "127.0.0.1:0")
            .replace("0.0.0.0:15000", &format!("127.0.0.1:{ws_port}")),
    );
    let mut node = Node::start(&["--config", local_cfg.path()]);
    node.proc
        .wait_for_line("WebSocket API on ws://", std::time::Duration::from_secs(20));
    let args: Vec<&str> = argv[1..]
        .iter()
        .map(|a| match a.as_str() {
            "/etc/tickwire/node.toml" => local_cfg.path(),
            other => other,
        })
        .collect();
    let health = run(&args, std::time::Duration::from_secs(20));
    assert_eq!(
        health.code(),
        Some(0),
        "{args:?}: {}{}",
        health.stdout,
        health.stderr
    );
    assert_eq!(health.stdout, "ok\n");
}
