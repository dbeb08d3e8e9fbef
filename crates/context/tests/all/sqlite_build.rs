//! The bundled SQLite is built as `.cargo/config.toml`'s `LIBSQLITE3_FLAGS` asks: without
//! the process-wide page-cache group and allocation statistics (their locks were 15% of a
//! `:memory:` append's profile). A build that lost the setting fails here, not only in a
//! benchmark.

#[test]
fn bundled_sqlite_has_no_process_wide_cache_or_memory_locks() {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    let options: Vec<String> = conn
        .prepare("PRAGMA compile_options")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
        "{options:?}"
    );
    assert!(
        !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
        "{options:?}"
    );
    // FTS5, which the store's index needs, is still there.
    assert!(options.iter().any(|o| o == "ENABLE_FTS5"), "{options:?}");
}
