"""mcp-evalserver sandbox supervisor: copy-on-write workspaces and sandboxed exec in one instance.

Stdlib only and Python >= 3.8, because this folder is copied into arbitrary images and run as
`python3 -I -S supervisor` (the folder: see __main__.py). It speaks the JSON-lines protocol of
protocol.py on its stdin/stdout, or on a unix socket (`--listen PATH`, docker's side door),
and takes more connections as sockets passed to it (`--connections FD`).

Modes. "container": the overlay's lower is `/` and uppers live on a non-overlay store (e.g. a
tmpfs at /trajs); the container needs CAP_SYS_ADMIN and CAP_NET_ADMIN (and no AppArmor
profile). "host" (the local backend): the view is an allowlist of the host (view.py) and the
overlay (lower = the instance directory) sits at that directory's own path; run it as root,
or as a user who may create user namespaces (then without cgroup limits).

One file per job, each importing only those above it:
  protocol.py     the wire protocol: every operation's arguments and result, typed
  linux.py        system calls through ctypes, kernel constants
  isolation.py    capabilities, seccomp, users, rlimits, the unprivileged user namespace
  cgroups.py      per-workspace pids and memory limits
  layers.py       stacked overlay layers: checkpoint, restore, fork, squash, archives
  workspace.py    a workspace's record
  view.py         what a trajectory sees: the container overlay, the host allowlist, /dev, /proc
  jobs.py         forked children whose pipes the loop drains, and their replies
  connections.py  connections besides the first
  state.py        the supervisor's state, which every operation takes
  exec_init.py    an exec's runner: confines itself, spawns the command, relays its output
  holders.py      a workspace's holder process (Python, or the compiled holder/)
  instance.py     init, freeze
  workspaces.py   ws_create, ws_destroy, ws_reset; spares and workspaces made ahead
  checkpoints.py  ws_checkpoint, ws_restore, ws_fork, ws_export, ws_end_processes
  execs.py        exec, diff
  files.py        read, write, list
  loop.py         the event loop and OPERATIONS, the table every request is dispatched by
  main.py         the process: stdio, --connections, --listen
"""
