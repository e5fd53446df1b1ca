// The architecture's rules, checked by `npm run lint` (docs/architecture.md draws them).
// The pipeline runs one way: tensor -> engine -> codegen -> renderer -> runtime, all on the core
// (helpers, dtype, shape, uop, device). A folder imports only folders below it; type-only imports count.

const core = "^src/(helpers|dtype|uop|device)\\.ts$|^src/shape/";
const layer = (path, mayImport, comment) => ({
  name: `${path.replace(/[^a-z]/g, "")}-imports-down`,
  comment,
  severity: "error",
  from: { path: `^src/${path}` },
  to: { path: "^src/", pathNot: [`^src/${path}`, core, ...mayImport] },
});

module.exports = {
  forbidden: [
    {
      name: "no-circular",
      comment: "A cycle makes two files one unit that neither can be read or tested without the other.",
      severity: "error",
      from: {},
      to: { circular: true },
    },
    {
      name: "core-imports-core",
      comment: "helpers, dtype, shape, uop and device are what every stage stands on; they know no stage.",
      severity: "error",
      from: { path: core },
      to: { path: "^src/", pathNot: core },
    },
    layer("runtime/", [], "A runtime runs what it is given: memory, compilers, programs; no search, no rendering."),
    layer("renderer/", ["^src/codegen/ir\\.ts$"], "A renderer turns the loop IR into text and nothing else."),
    layer("codegen/", ["^src/renderer/"], "Codegen lowers kernels to loop IR; it knows no Tensor, engine or device."),
    layer(
      "engine/",
      ["^src/codegen/", "^src/renderer/", "^src/runtime/"],
      "The engine schedules and realizes; it knows no Tensor.",
    ),
    layer("tensor/", ["^src/engine/"], "The frontend builds graphs and asks the engine to realize them."),
    layer("nn/", ["^src/tensor/", "^src/io/"], "Layers and optimizers are compositions of Tensor ops."),
    layer("io/", [], "File formats read and write bytes; they know nothing of tensors."),
    layer(
      "dist/",
      ["^src/tensor/index\\.ts$"],
      "Processes talk through host arrays (and Tensors, through src/tensor/index.ts); nothing below the engine.",
    ),
    {
      name: "tensor-through-index",
      comment:
        "The op families attach their methods as src/tensor/index.ts loads them; elsewhere a Tensor comes from there.",
      severity: "error",
      from: { pathNot: "^src/tensor/" },
      to: { path: "^src/tensor/(?!index\\.ts$)" },
    },
    {
      name: "outside-uses-public-api",
      comment: "models/, mlperf/ and examples/ use the package as a user does: through src/index.ts.",
      severity: "error",
      from: { path: "^(models|mlperf|examples)/" },
      to: { path: "^src/", pathNot: "^src/index\\.ts$" },
    },
    {
      name: "models-know-no-benchmark",
      comment: "A model is reusable; the benchmark builds on it, not the other way round.",
      severity: "error",
      from: { path: "^models/" },
      to: { path: "^mlperf/" },
    },
    {
      name: "no-unresolvable",
      comment: "An import that does not resolve is a typo or a missing dependency.",
      severity: "error",
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"] },
  },
};
