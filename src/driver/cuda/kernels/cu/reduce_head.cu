// A reduction module's generated part (kernels/codegen.rs fills the ${...} placeholders):
// its dtypes, vector width and layout switches; reduce_acc.cu or reduce_arg.cu follows.
#define VEC ${vec}
#define SPLIT_ACC ${split}
#define HALF_RUNS ${runs}
#define VALUES ${values}
#define ARG ${arg}
#define COLX ${colx}
typedef ${ts} TS;
typedef ${td} TD;
