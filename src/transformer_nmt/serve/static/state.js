// What the page holds between events, shared by its modules.

export const state = {
  server: null, // GET /v1/models' answer: the models, pairs, defaults and limits
  pair: null, // the chosen {source, target, pivot} of server.pairs; null where it has none
  busy: false, // a translation request is in flight
  result: null, // {sourceText, doc, pair, sentences: [prepared sentence]} of the last translation
  lit: [], // elements lit by the current hover, to clear them
  current: null, // the sentence card marked current
  selection: { layer: "avg", head: "avg" }, // the attention shown: a layer and head, or averages
};
