// fastattn/fastattn.hpp — everything a caller needs.
#pragma once

#include "fastattn/attention.hpp"
#include "fastattn/environment.hpp"
#include "fastattn/error.hpp"
#include "fastattn/cooperative.hpp"
#include "fastattn/kv_cache.hpp"
#include "fastattn/memory.hpp"
#include "fastattn/merge.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"
#include "fastattn/version.hpp"
