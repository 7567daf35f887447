#!/usr/bin/env bash
# Session 32: on an H200 the bars (s32-c2.sh), on another card the cluster3 A/B (s32-c3.sh).
# carry ["build/calls", "build/carry-wave", "build/carry-s32b"].
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if grep -q H200 <<< "$gpu"; then bash build/calls/s32-c2.sh; else bash build/calls/s32-c3.sh; fi
