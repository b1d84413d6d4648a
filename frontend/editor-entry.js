// The CodeMirror pieces static/js/editor.js uses, bundled once into static/vendor/codemirror.js.
export { basicSetup } from "codemirror";
export { EditorView, keymap } from "@codemirror/view";
export { EditorState, Compartment } from "@codemirror/state";
export { indentWithTab } from "@codemirror/commands";
export { python } from "@codemirror/lang-python";
export { oneDark } from "@codemirror/theme-one-dark";
