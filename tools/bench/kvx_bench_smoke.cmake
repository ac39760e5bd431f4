# kvx-bench smoke test: runs two tiny benchmarks with a tiny ceiling measurement and checks that the JSON has
# the ceilings in its context and every counter in each benchmark, with positive rates.
#   cmake -DKVX_BENCH=path/to/kvx-bench -DOUT=path/to/out.json -P kvx_bench_smoke.cmake
execute_process(
  COMMAND ${KVX_BENCH} --ceiling_quick --benchmark_min_time=0.01
          "--benchmark_filter=^(decode_attention/smollm2/threads:1/context:128/batch:1/block:16/layout:1|rmsnorm/threads:1/rows:1/width:576)/real_time$"
          --benchmark_out=${OUT} --benchmark_out_format=json
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "kvx-bench exited with ${status}")
endif()
file(READ ${OUT} json)

foreach(key kvx_read_GBps_threads_1 kvx_peak_fma_GFLOPs_portable_threads_1 kvx_peak_int8_GOPs_portable_threads_1 kvx_simd_level)
  string(JSON value ERROR_VARIABLE error GET "${json}" context ${key})
  if(error)
    message(FATAL_ERROR "the JSON context has no ${key}: ${error}")
  endif()
endforeach()

string(JSON count LENGTH "${json}" benchmarks)
if(NOT count EQUAL 2)
  message(FATAL_ERROR "expected 2 benchmarks in the JSON, found ${count}")
endif()
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${json}" benchmarks ${i} name)
  foreach(counter bytes flops GB/s GFLOP/s frac_of_read_bw frac_of_peak_fma)
    string(JSON value ERROR_VARIABLE error GET "${json}" benchmarks ${i} ${counter})
    if(error)
      message(FATAL_ERROR "${name} has no counter ${counter}: ${error}")
    endif()
    if(NOT value GREATER 0)
      message(FATAL_ERROR "${name}: ${counter} is ${value}, not positive")
    endif()
  endforeach()
endforeach()
message(STATUS "kvx-bench JSON: ceilings and counters present for ${count} benchmarks")
