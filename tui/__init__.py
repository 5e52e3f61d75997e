"""fleetdeck's terminal UI: a Textual app whose network side runs in trio (see `tui.bridge`)."""
