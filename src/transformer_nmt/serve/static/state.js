// What the page holds between events, shared by its modules.

export const state = {
  model: null, // GET /v1/model's answer
  busy: false, // a translation request is in flight
  result: null, // {sourceText, doc, sentences: [prepared sentence]} of the last translation
  lit: [], // elements lit by the current hover, to clear them
  current: null, // the sentence card marked current
  selection: { layer: "avg", head: "avg" }, // the attention shown: a layer and head, or averages
};
