"""The people's console: login, sessions, CSRF, and server-rendered pages."""
