// Compiled once to produce the shared precompiled header (core/pch.h).
