"""The pure core: request documents, presets, checks, layout, failure taxonomy, commands and manifests. No I/O."""
