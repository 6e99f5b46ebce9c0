"""One module per command; ``dsdoctor/cli.py`` registers them."""
