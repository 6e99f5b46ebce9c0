"""Session-wide test setup.

A shell that starts a command in the background without job control (``cmd &`` in a script, or CI runners that do
so) sets SIGINT to "ignored" for it, and an ignored signal stays ignored across exec: every ``dsdoctor smoke`` or
``nccl`` a test starts would then ignore the Ctrl-C the lifecycle tests send, as a user's terminal never does. The
test process restores Python's own handler, so the processes it starts get the default disposition, as from a
terminal. (Seen on this machine: three Ctrl-C tests timed out when the suite ran from a background script.)
"""

import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
