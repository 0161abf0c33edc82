#compdef ncclenv
# zsh completion for ncclenv (made by `ncclenv completions zsh` from its table of options and subcommands)
_ncclenv() {
  local curcontext=$curcontext state state_descr line ret=1
  local -A opt_args
  local -i dd=${words[(i)--]}
  if (( dd < CURRENT )); then
    # The job's command after --.
    words=("${(@)words[dd + 1, -1]}")
    (( CURRENT -= dd ))
    _normal
    return
  fi
  local -a subcommands=(
    'env:Print the decisions as shell lines (export NAME='\''value'\'', unset NAME) for eval "$(ncclenv env)"'
    'doctor:Everything probed and decided'
    'check:Prove the environment the entrypoint would give COMMAND with the real NCCL, in the helper ncclenv-check (glibc) beside ncclenv'
    'install:Copy ncclenv (and ncclenv-check beside it) into DIR (created when its parent exists), mode 755, through a rename'
    'explain:Read NCCL debug logs (per-process files or a job'\''s combined log; stdin when no FILE)'
    'help:This page, or one subcommand'\''s (also: ncclenv SUBCOMMAND --help)'
    'completions:Print the completion script of the shell, made from ncclenv'\''s table of options and subcommands'
  )
  _arguments -C -S \
    '--peer=[the job'\''s master host or address]:peer:_hosts' \
    '--nnodes=[number of nodes of the job]:nnodes: ' \
    '--strict[refuse on strict findings (exit 78)]' \
    '--log=[off|error|warn|info|debug (info)]:log:(off error warn info debug)' \
    '--log-format=[text|json lines on stderr (text)]:log-format:(text json)' \
    '--termination-log=[where exit 78 writes its reason (default /dev/termination-log when it exists and is writable)]:termination-log:_files' \
    '--exclude=[interface names never to choose]:exclude: ' \
    '--disable[change nothing, just exec]' \
    '--sysfs=[sysfs root (/sys)]:sysfs:_files' \
    '--devfs=[dev root (/dev)]:devfs:_files' \
    '--shm-path=[shared memory path (/dev/shm)]:shm-path:_files' \
    '--shm-min=[free /dev/shm needed, MiB]:shm-min: ' \
    '--check=[off|bootstrap|allreduce before exec]:check:(off bootstrap allreduce)' \
    '--check-timeout=[deadline of the check (60)]:check-timeout: ' \
    '--check-gpus=[ranks of the allreduce check (2)]:check-gpus: ' \
    '--check-mib=[allreduce buffer, MiB (64)]:check-mib: ' \
    '--check-repair[retry a failed allreduce safer]' \
    '--check-helper=[the ncclenv-check helper]:check-helper:_files' \
    '--nccl-lib=[libnccl to load for the check]:nccl-lib:_files' \
    '--resolve-timeout-ms=[bound on resolving the peer (2000; 600000 for a job that may span nodes)]:resolve-timeout-ms: ' \
    '--debug[NCCL'\''s own logs for the command: sets NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE (each when unset; one file per host and process) and the launcher'\''s debug switch]' \
    '--debug-dir=[folder of those files (/tmp/ncclenv-debug)]:debug-dir:_files' \
    '--preflight[the nodes meet and agree before exec]' \
    '--preflight-timeout=[wait for the other nodes (60)]:preflight-timeout: ' \
    '--preflight-port=[port to meet on (the master'\''s port)]:preflight-port: ' \
    '--preflight-measure[measure the networks every node shares (1)]' \
    '--json[one JSON object (doctor, check, explain)]' \
    '(- *)'{-h,--help}'[the help page (of the subcommand)]' \
    '(- *)'{-V,--version}'[the version]' \
    '1: :->subcommand' \
    '*:: :->argument' && ret=0
  case $state in
    subcommand) _describe -t subcommands 'ncclenv subcommand' subcommands && ret=0 ;;
    argument)
      case $words[1] in
      check) (( CURRENT == 2 )) && compadd -- bootstrap allreduce && ret=0 ;;
      install) (( CURRENT == 2 )) && _files -/ && ret=0 ;;
      explain) _files && ret=0 ;;
      help) (( CURRENT == 2 )) && _describe -t subcommands 'ncclenv subcommand' subcommands && ret=0 ;;
      completions) (( CURRENT == 2 )) && compadd -- bash zsh fish && ret=0 ;;
      esac ;;
  esac
  return ret
}
if [[ $funcstack[1] == _ncclenv ]]; then
  _ncclenv "$@"
else
  compdef _ncclenv ncclenv
fi
