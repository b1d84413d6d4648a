// The CodeMirror pieces static/js/editor.js uses, bundled once into static/vendor/codemirror.js.
export { basicSetup } from "codemirror";
export { Decoration, EditorView, GutterMarker, gutter, keymap, ViewPlugin } from "@codemirror/view";
export { EditorState, Compartment, Prec, RangeSet, StateEffect, StateField } from "@codemirror/state";
export { indentWithTab } from "@codemirror/commands";
export { indentUnit } from "@codemirror/language";
export { closeCompletion, completionStatus } from "@codemirror/autocomplete";
export { python } from "@codemirror/lang-python";
export { oneDark } from "@codemirror/theme-one-dark";
