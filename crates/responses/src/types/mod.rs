//! Wire types with serde. Every struct keeps unknown fields in `extra` and every union keeps
//! unknown variants in `Other`, so anything read can be sent back verbatim.

mod event;
mod item;
mod request;
mod response;
pub(crate) mod tagged;
pub mod text_format;
mod tool;

pub use event::{
    ArgumentsDoneEvent, ContentPartEvent, DeltaEvent, ErrorDetail, ErrorEvent, ItemScopedEvent,
    OutputItemEvent, ResponseEvent, StreamEvent, TextDoneEvent,
};
pub use item::{
    Caller, Compaction, ContentPart, CustomToolCall, CustomToolCallOutput, Fields, FunctionCall,
    FunctionCallOutput, Item, MessageContent, MessageItem, Program, ProgramCaller, ProgramOutput,
    Reasoning, RefusalPart, TextPart, ToolOutput,
};
pub use request::{CompactRequest, CreateResponse, Input};
pub use response::{CompactedResponse, Response, ResponseError, Usage};
pub use tagged::{EmitsTag, Nullable};
pub use text_format::JsonSchemaFormat;
pub use tool::{CustomTool, FunctionTool, ToolDefinition};
