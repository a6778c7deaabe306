"""The workspace tool pack: files, search and patches beneath one root directory."""
