# Sourced by the scripts: where downloaded data lives (never inside the repository).
# Override GPT_DATA_DIR to keep the vocabulary and corpora elsewhere.
export GPT_DATA_DIR="${GPT_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt_zeropp}"
