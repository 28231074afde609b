#!/usr/bin/env bash
# Session 31, call 1, nvidia-h100-x2: session 30's next-driver.sh as it stood (a copy of it ran; its setup lines say
# how the trees base, cf, cfh and pr were made from 67c141e and its two patches).
exec bash docs/results/2026-11-27-h100x2-session30/next-driver.sh
