#!/usr/bin/env bash
# Session 34: on an H200 the bars (s32-c6.sh: issue 16's backward rows, issue 17's CPU decode on
# the host, issue 15's forward sweep with the wave and persistent variants), on any other card
# s34-c2.sh (ncu of three short causal rows, the narrow d = 64 tile forced, A/B). One start for
# either. carry ["build/calls", "build/carry-wave", "build/probe"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if grep -q H200 <<< "$gpu"; then OUT=$OUT bash build/calls/s32-c6.sh; else OUT=$OUT bash build/calls/s34-c2.sh; fi
