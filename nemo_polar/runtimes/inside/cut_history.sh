#!/bin/sh
# The working copy's git repository cut at a commit: nothing of what came after it.
#
#   sh cut_history.sh COMMIT [SOURCE]      in the working copy (its folder is the current directory)
#
# A new repository is made from the objects COMMIT reaches (its own history, nothing later) read out of
# SOURCE (a repository, default the working copy's own), with one ref: the branch HEAD was on, else a
# detached HEAD, at COMMIT. It replaces the working copy's .git: no other branch, tag, remote, reflog,
# stash, note, packed or loose object, ORIG_HEAD or FETCH_HEAD is left, and COMMIT keeps its hash. The
# index is made anew from COMMIT; the files are not touched. A folder that is no repository is left as it is.
# POSIX sh and git only: it runs in the task's image (runtimes/history.py runs it on this machine too).
set -eu
commit=${1:-HEAD}
source=${2:-.}
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 GIT_OPTIONAL_LOCKS=0
g() { git -c safe.directory='*' -c core.fsmonitor=false -c core.hooksPath=/dev/null "$@"; }
if [ "$source" = . ] && [ ! -e .git ]; then
  exit 0
fi
from=$(cd "$source" && g rev-parse --absolute-git-dir) || { echo "cut_history: $source is not a git repository" >&2; exit 3; }
base=$(g --git-dir="$from" rev-parse --verify --quiet "$commit^{commit}") || {
  echo "cut_history: $commit is not a commit of $source" >&2; exit 3; }
branch=$(g --git-dir="$from" symbolic-ref --quiet HEAD || true)
new=.git.polar-cut
rm -rf "$new"
g init --quiet --bare "$new"
echo "$base" | g --git-dir="$from" pack-objects --revs --stdout --quiet | g --git-dir="$new" index-pack --stdin >/dev/null
if [ -f "$from/shallow" ]; then  # a shallow source's boundary: its parents are not there either
  cp "$from/shallow" "$new/shallow"
fi
if [ -f "$from/info/exclude" ]; then
  cp "$from/info/exclude" "$new/info/exclude"
fi
if [ -n "$branch" ]; then
  g --git-dir="$new" update-ref "$branch" "$base"
  g --git-dir="$new" symbolic-ref HEAD "$branch"
else
  g --git-dir="$new" update-ref --no-deref HEAD "$base"
fi
g --git-dir="$new" config core.bare false
rm -rf .git
mv "$new" .git
g read-tree HEAD  # not `reset`: it would leave an ORIG_HEAD
g update-index -q --refresh >/dev/null || true  # differences are the working copy's; status shows them
