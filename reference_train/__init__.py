"""The reference trainer (train.py) and its bundled assets; installed as dsdoctor.reference_train."""
