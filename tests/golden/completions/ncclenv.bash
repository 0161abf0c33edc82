# bash completion for ncclenv (made by `ncclenv completions bash` from its table of options and subcommands)
_ncclenv_reply() {
    mapfile -t COMPREPLY < <(compgen "$@" -- "$cur")
}
_ncclenv() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]} sub='' n=0 i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
        --)
            # The job's command: a command name first, then what that command takes.
            if ((i == COMP_CWORD - 1)); then _ncclenv_reply -c; else compopt -o default; COMPREPLY=(); fi
            return ;;
        --peer|--nnodes|--log|--log-format|--termination-log|--exclude|--sysfs|--devfs|--shm-path|--shm-min|--check|--check-timeout|--check-gpus|--check-mib|--check-helper|--nccl-lib|--resolve-timeout-ms|--debug-dir|--preflight-timeout|--preflight-port) [[ ${COMP_WORDS[i + 1]-} == = ]] && ((i++)); ((i++)) ;;
        -*) [[ ${COMP_WORDS[i + 1]-} == = ]] && ((i += 2)) ;;
        *) if [[ -z $sub ]]; then sub=$w; else ((n++)); fi ;;
        esac
    done
    if [[ $cur == = ]]; then
        cur=
    elif [[ $prev == = ]]; then
        prev=${COMP_WORDS[COMP_CWORD - 2]}
    fi
    case $prev in
    --peer) _ncclenv_reply -A hostname; return ;;
    --nnodes) :; return ;;
    --log) _ncclenv_reply -W 'off error warn info debug'; return ;;
    --log-format) _ncclenv_reply -W 'text json'; return ;;
    --termination-log) compopt -o filenames; _ncclenv_reply -f; return ;;
    --exclude) :; return ;;
    --sysfs) compopt -o filenames; _ncclenv_reply -f; return ;;
    --devfs) compopt -o filenames; _ncclenv_reply -f; return ;;
    --shm-path) compopt -o filenames; _ncclenv_reply -f; return ;;
    --shm-min) :; return ;;
    --check) _ncclenv_reply -W 'off bootstrap allreduce'; return ;;
    --check-timeout) :; return ;;
    --check-gpus) :; return ;;
    --check-mib) :; return ;;
    --check-helper) compopt -o filenames; _ncclenv_reply -f; return ;;
    --nccl-lib) compopt -o filenames; _ncclenv_reply -f; return ;;
    --resolve-timeout-ms) :; return ;;
    --debug-dir) compopt -o filenames; _ncclenv_reply -f; return ;;
    --preflight-timeout) :; return ;;
    --preflight-port) :; return ;;
    esac
    if [[ $cur == -* ]]; then
        _ncclenv_reply -W '--peer --nnodes --strict --log --log-format --termination-log --exclude --disable --sysfs --devfs --shm-path --shm-min --check --check-timeout --check-gpus --check-mib --check-repair --check-helper --nccl-lib --resolve-timeout-ms --debug --debug-dir --preflight --preflight-timeout --preflight-port --preflight-measure --json --help --version -h -V --'
        return
    fi
    case $sub in
    '') _ncclenv_reply -W 'env doctor check install explain help completions' ;;
    check) ((n == 0)) && _ncclenv_reply -W 'bootstrap allreduce' ;;
    install) ((n == 0)) && compopt -o filenames && _ncclenv_reply -d ;;
    explain) compopt -o default; COMPREPLY=() ;;
    help) ((n == 0)) && _ncclenv_reply -W 'env doctor check install explain help completions' ;;
    completions) ((n == 0)) && _ncclenv_reply -W 'bash zsh fish' ;;
    esac
}
complete -F _ncclenv ncclenv
