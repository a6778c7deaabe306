"""The payments example served over HTTP by `handrail serve` (config: handrail.toml)."""
