//! `CUDASEM_ALLOC_CONF` parsing: PyTorch's syntax and keys, and typed errors that name the key
//! and say what is expected.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::cuda::AllocatorSettings;
    use cudasem::{Config, Error};

    /// The variable's public name (API.md).
    const ALLOC_CONF_ENV: &str = "CUDASEM_ALLOC_CONF";

    #[test]
    fn valid_settings() {
        let s = AllocatorSettings::parse(
            "max_split_size_mb:256,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],\
         garbage_collection_threshold:0.8,expandable_segments:True",
        )
        .unwrap();
        assert_eq!(s.max_split_size(), Some(256 << 20));
        assert_eq!(s.garbage_collection_threshold(), Some(0.8));
        assert!(s.expandable_segments());
        assert_eq!(s.roundup_power2_divisions(100 << 20), 1);
        assert_eq!(s.roundup_power2_divisions(300 << 20), 2);
        assert_eq!(s.roundup_power2_divisions(600 << 20), 4);
        assert_eq!(s.roundup_power2_divisions(5 << 30), 8);
        // 300 MiB with 2 divisions of [256, 512) MiB: 384 MiB.
        assert_eq!(s.round_size(300 << 20), 384 << 20);
        assert_eq!(s.round_size(100 << 20), 100 << 20, "1 division: plain 512-byte rounding");

        let d = AllocatorSettings::parse("").unwrap();
        assert_eq!(d, AllocatorSettings::default());
        assert_eq!(
            (d.max_split_size(), d.garbage_collection_threshold(), d.expandable_segments()),
            (None, None, false)
        );
        assert_eq!(d.max_non_split_rounding(), 20 << 20);

        let s =
            AllocatorSettings::parse("roundup_power2_divisions:8, expandable_segments:False ,backend:native").unwrap();
        assert_eq!(s.roundup_power2_divisions(1 << 10), 8);
        assert_eq!(s.round_size(5000), 5120, "5000 > 512·8: eighths of [4096, 8192)");
        assert!(!s.expandable_segments());
        let s = AllocatorSettings::parse("max_non_split_rounding_mb:64,pinned_num_register_threads:8").unwrap();
        assert_eq!((s.max_non_split_rounding(), s.pinned_num_register_threads()), (64 << 20, 8));
        assert!(AllocatorSettings::parse("release_lock_on_cudamalloc:True").unwrap().release_lock_on_cudamalloc());
    }

    #[track_caller]
    fn rejects(conf: &str, key: &str, expected: &str) {
        match AllocatorSettings::parse(conf) {
            Err(e @ Error::InvalidConfig { .. }) => {
                let Error::InvalidConfig { key: k, reason, .. } = &e else { unreachable!() };
                assert_eq!(k, key, "{conf}: {e}");
                assert!(reason.contains(expected), "{conf}: {e}");
                assert!(e.to_string().contains(key), "{e}");
            }
            other => panic!("{conf}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn invalid_settings_name_the_key_and_what_is_expected() {
        rejects("max_split_size_mb:20", "max_split_size_mb", "greater than 20");
        rejects("max_split_size_mb:lots", "max_split_size_mb", "integer number of MiB");
        rejects("max_split_size_mb:-5", "max_split_size_mb", "integer");
        rejects("garbage_collection_threshold:1.0", "garbage_collection_threshold", "between 0.0 and 1.0");
        rejects("garbage_collection_threshold:0", "garbage_collection_threshold", "between 0.0 and 1.0");
        rejects("garbage_collection_threshold:x", "garbage_collection_threshold", "between 0.0 and 1.0");
        rejects("expandable_segments:true", "expandable_segments", "True or False");
        rejects("expandable_segments:1", "expandable_segments", "True or False");
        rejects("roundup_power2_divisions:3", "roundup_power2_divisions", "power of two");
        rejects("roundup_power2_divisions:0", "roundup_power2_divisions", "power of two");
        rejects("roundup_power2_divisions:[100:2]", "roundup_power2_divisions", "powers of two");
        rejects("roundup_power2_divisions:[256:3]", "roundup_power2_divisions", "powers of two or 0");
        rejects("roundup_power2_divisions:[512:2,256:4]", "roundup_power2_divisions", "increasing");
        rejects("roundup_power2_divisions:[>:2,256:4]", "roundup_power2_divisions", "nothing may follow");
        rejects("roundup_power2_divisions:[256:1", ALLOC_CONF_ENV, "unbalanced brackets");
        rejects("max_non_split_rounding_mb:10", "max_non_split_rounding_mb", "at least 20");
        rejects("pinned_num_register_threads:3", "pinned_num_register_threads", "power of two");
        rejects("backend:cudaMallocAsync", "backend", "native");
        rejects("max_split_size:128", "max_split_size", "unknown");
        rejects("expandable_segments", ALLOC_CONF_ENV, "key:value");
        assert!(AllocatorSettings::default().with_max_split_size_mb(21).is_ok());
        assert!(AllocatorSettings::default().with_garbage_collection_threshold(f64::NAN).is_err());
    }

    /// `CUDASEM_ALLOC_CONF` as the runtime reads it, through `Config::from_env_with` (an
    /// environment given as a function, so no test changes the process's environment).
    #[test]
    fn read_from_the_environment() {
        let env = |conf: &'static str| move |k: &str| (k == ALLOC_CONF_ENV).then(|| conf.to_string());
        let s = Config::from_env_with(env("expandable_segments:True,max_split_size_mb:64")).unwrap().allocator;
        assert!(s.expandable_segments());
        assert_eq!(s.max_split_size(), Some(64 << 20));
        match Config::from_env_with(env("max_split_size_mb:1")) {
            Err(Error::InvalidConfig { key, value, .. }) => {
                assert_eq!((key.as_str(), value.as_str()), ("max_split_size_mb", "1"))
            }
            other => panic!("expected InvalidConfig for max_split_size_mb, got {other:?}"),
        }
        assert_eq!(Config::from_env_with(|_| None).unwrap().allocator, AllocatorSettings::default());
        assert_eq!(Config::from_env_with(env("")).unwrap().allocator, AllocatorSettings::default());
    }

    /// The settings read from serde (a config file) with the same syntax and the same errors.
    #[test]
    fn read_from_serde() {
        let s: AllocatorSettings = serde_json::from_str(r#""roundup_power2_divisions:4""#).unwrap();
        assert_eq!(s, AllocatorSettings::parse("roundup_power2_divisions:4").unwrap());
        let e = serde_json::from_str::<AllocatorSettings>(r#""max_split_size_mb:abc""#).unwrap_err().to_string();
        assert!(e.contains("max_split_size_mb") && e.contains("abc"), "{e}");
    }
}
