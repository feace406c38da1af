// run_mpi_main; see mpi_main.h.
#include "comm/mpi_main.h"

#include "base/main.h"

namespace gpt::comm {

int run_mpi_main(const char* program, int& argc, char**& argv, const std::function<int(MpiSession&)>& body) {
  return run_main(program, [&] {
    MpiSession session(argc, argv);
    int code = 0;
    try {
      code = body(session);
    } catch (...) {
      code = report_exception(program);
      if (code != 2 && session.world_size() > 1) abort_job(code);
    }
    session.set_exit_code(code);  // for the finished-work marker (see MpiSession's destructor)
    return code;
  });
}

}  // namespace gpt::comm
