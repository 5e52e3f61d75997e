"""The screens of the TUI: server list → files of one server → viewer of one file; help."""
