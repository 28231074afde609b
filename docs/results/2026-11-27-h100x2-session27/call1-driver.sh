#!/usr/bin/env bash
# Call 1 (nvidia-h100-x2, 488 s): session 26's next-shrink-driver.sh as it is (its setup lines say how the trees
# base, sh, shh and nw were made; carry [".exp/base", ".exp/sh", ".exp/shh", ".exp/nw"]).
exec bash docs/results/2026-11-27-h100x2-session26/next-shrink-driver.sh
