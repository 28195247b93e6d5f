"""What a session leaves behind: its timeline, the figures read off it, its plot."""
