"""`polar view`: a local web page over a run's stores, a record store, or a running rollout server.

    sources.py   where sessions and calls come from: a run folder or store (SQLite), or a rollout
                 server (through the control-plane client, `nemo_polar.server.client.RolloutAPI`)
    session.py   one session for the page: its calls, rollup, chain tree and traces
    tree.py      the prefix-tree builder's tree of calls: forks, sub-agents, compactions, drift
    tokens.py    token ids as text, with the run's tokenizer when it is known
    app.py       the Starlette app (JSON API, server-sent changes, the page in static/), served by
                 `nemo_polar.serving`
    browser.py   Debian's chromium, headless, through playwright (tests and `polar bench view`)

The page is plain HTML, CSS and JavaScript in static/, shipped in the package: no build step, no CDN.
Nothing here writes to a store.
"""
