"""deck's built-in feature plugins: idle_stop, logs, announcements."""
