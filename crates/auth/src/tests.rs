use super::*;

fn users() -> Users {
    let pw = hash_password("s3cret").unwrap();
    let text = format!(
        r#"
[users.alice]
password_hash = "{pw}"
groups = ["traders"]
subscribe = ["FEED"]

[users.feed]
token_hash = "{}"
publish = ["FEED", "NEWS"]

[users.edge-ldn]
token_hash = "{}"
subscribe = ["FILES"]
groups = ["london"]
sites = ["ldn-1"]

[groups.traders]
subscribe = ["*"]
post = ["ORDERS"]

[groups.london]
sites = ["ldn-2"]
"#,
        hash_token("tok-123"),
        hash_token("tok-456")
    );
    Users::parse(&text, "users.toml").unwrap()
}

#[test]
fn secrets_are_checked_against_their_hashes() {
    let u = users();
    assert_eq!(u.verify("alice", "s3cret"), Ok(()));
    assert!(u.verify("alice", "S3cret").is_err());
    assert_eq!(u.verify("feed", "tok-123"), Ok(()));
    assert!(u.verify("feed", "tok-124").is_err());
    // An unknown user gets the same answer as a wrong secret.
    assert_eq!(
        u.verify("mallory", "x").unwrap_err().to_string(),
        "login rejected for user \"mallory\": unknown user or wrong secret"
    );
}

#[test]
fn rights_join_the_users_own_and_their_groups() {
    let u = users();
    assert!(u.may("alice", Action::Subscribe, "ANYTHING"));
    assert!(u.may("alice", Action::Post, "ORDERS"));
    assert!(!u.may("alice", Action::Post, "FEED"));
    assert!(!u.may("alice", Action::Publish, "FEED"));
    assert!(u.may("feed", Action::Publish, "NEWS"));
    assert!(!u.may("feed", Action::Subscribe, "FEED"));
    assert!(!u.may("nobody", Action::Subscribe, "FEED"));
    assert_eq!(
        Anonymous::Subscribe.entitlements().unwrap().publish,
        Services::None
    );
    assert!(Anonymous::None.entitlements().is_none());
}

#[test]
fn a_user_speaks_for_the_files_sites_it_is_given_and_the_one_of_its_name() {
    let u = users();
    let may = |user: &str, site: &str| {
        u.entitlements(user)
            .is_some_and(|e| e.may_be_site(user, site))
    };
    assert!(may("edge-ldn", "ldn-1"), "its own list");
    assert!(may("edge-ldn", "ldn-2"), "its group's");
    assert!(may("edge-ldn", "edge-ldn"), "its own name");
    assert!(!may("edge-ldn", "nyc-1"));
    // Subscribing to every service (the files service too) names no site.
    assert!(!may("alice", "ldn-1"));
    assert!(!may("nobody", "nobody"), "an unknown user speaks for none");
    assert_eq!(
        Anonymous::Subscribe.entitlements().unwrap().sites,
        Services::None
    );
}

#[test]
fn bad_files_name_the_file_the_key_and_what_is_allowed() {
    let cases = [
        ("[users.a]\nsubscribe = []\n", "users.a: needs exactly one of password_hash or token_hash"),
        ("[users.a]\ntoken_hash = \"abc\"\n", "users.a.token_hash: not a token hash"),
        ("[users.a]\npassword_hash = \"plain\"\n", "users.a.password_hash: not an argon2 password hash"),
        (
            "[users.a]\ntoken_hash = \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"\ngroups = [\"x\"]\n",
            "users.a.groups: unknown group \"x\"",
        ),
        ("[users.a]\npasword_hash = \"x\"\n", "unknown field `pasword_hash`"),
        ("[groups.g]\nsubscribe = [\"\"]\n", "groups.g.subscribe: \"\": a service name or \"*\" for all"),
        ("[groups.g]\nsites = [\"\"]\n", "groups.g.sites: \"\": a site name or \"*\" for all"),
    ];
    for (text, want) in cases {
        let e = Users::parse(text, "u.toml").unwrap_err().to_string();
        assert!(
            e.contains("u.toml") && e.contains(want),
            "{e}\nwanted: {want}"
        );
    }
}

#[test]
fn changes_name_what_a_reload_changed() {
    let a = users();
    let mut b = a.clone();
    b.users.remove("feed");
    b.users.get_mut("alice").unwrap().rights.post = Services::None;
    assert_eq!(
        a.changes(&b),
        vec![
            "user \"alice\" entitlements changed".to_string(),
            "user \"feed\" removed".to_string()
        ]
    );
}
