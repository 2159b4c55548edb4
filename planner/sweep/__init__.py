"""``plan sweep``: spec (TOML) -> chunked kernel runs -> one Parquet dataset."""
