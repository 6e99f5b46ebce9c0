"""`dsdoctor preflight`: reading a launch line (cmdline), its script (script), its settings (settings) and files
(plan, datafiles) without running any of them, and running the other commands' checks on them (sections)."""
