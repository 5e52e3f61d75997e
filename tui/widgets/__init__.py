"""Line API widgets (directory pane, code view) and small Textual fixes (SafeHeader)."""
