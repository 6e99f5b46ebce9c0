"""The checks, one module per rule family; installed as dsdoctor.checks."""
