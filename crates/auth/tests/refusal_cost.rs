//! What a refused login costs, counted in the checking thread's CPU time (the wall
//! clock's grows with every process that takes the CPU meanwhile).

use tickwire_auth::{hash_password, hash_token, Users};

/// This thread's time on a CPU.
fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A refusal costs about as much whoever it names: an unknown user's pays a password
/// check, and so must a token user's wrong token (it was refused in microseconds, which
/// told anyone which names are token users: the node's publishers and edge nodes).
#[test]
fn a_token_users_refusal_takes_as_long_as_an_unknown_users() {
    let text = format!(
        "[users.alice]\npassword_hash = \"{}\"\n[users.feed]\ntoken_hash = \"{}\"\n",
        hash_password("s3cret").unwrap(),
        hash_token("feed-token")
    );
    let u = Users::parse(&text, "users.toml").unwrap();
    let median = |user: &str| {
        let mut times: Vec<std::time::Duration> = (0..5)
            .map(|_| {
                let t0 = thread_cpu_time();
                assert!(u.verify(user, "wrong").is_err());
                thread_cpu_time() - t0
            })
            .collect();
        times.sort();
        times[2]
    };
    let unknown = median("nobody");
    let token_user = median("feed");
    assert!(
        token_user * 4 >= unknown,
        "a token user's refusal took {token_user:?} of CPU, an unknown user's {unknown:?}"
    );
}
