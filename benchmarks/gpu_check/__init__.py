"""`make gpu-check`: the book's GPU half in one command (issue 26); see `runner` for the command line."""
