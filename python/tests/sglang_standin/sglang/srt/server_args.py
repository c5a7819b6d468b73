"""The ServerArgs fields of SGLang 8905cbd that FlatCake's documentation uses, with their choices
(SGLang declares each field once; its command-line flag is the field name with dashes). Written
for the docs test from SGLang's python/sglang/srt/server_args.py at that commit; a subset."""

FIELDS = {
    "model_path": None,
    "page_size": None,
    "enable_hierarchical_cache": None,
    "hicache_io_backend": ("direct", "kernel", "kernel_ascend"),
    "hicache_mem_layout": ("layer_first", "page_first", "page_first_direct", "page_first_kv_split",
                           "page_head"),
    "hicache_storage_backend": None,
    "hicache_storage_backend_extra_config": None,
    "enable_metrics": None,
    "enable_dp_attention": None,
    "tp_size": None,
    "dp_size": None,
}
